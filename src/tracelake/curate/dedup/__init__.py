"""Near-duplicate tasks and benchmark decontamination (stage `dedup`).

shingles.py        normalised words, word n-gram hashes (MinHash shingles, 13-gram overlap)
minhash.py         MinHash signatures, LSH banding, candidate pairs verified by true Jaccard
embed.py           embedders: hashed character n-grams (model-free default)
vectors.py         the embedding cache by (embedder, text sha256); the LanceDB table; range search
clusters.py        union-find over verified pairs -> task_clusters rows
decontaminate.py   benchmark instructions, n-gram overlap and embedding similarity -> contamination
run.py             the stage's work, from the tasks table to both tables
"""
