"""tracelake: a versioned, content-addressed lake for agentic training data.

Raw agent runs (Harbor job directories, published trace tables, task directories) go in; validated,
deterministic Parquet tables come out, each directory named by its content in a manifest.json.
The `tracelake` command line (tracelake.cli) and the DVC stages in stages/ are thin layers over
the modules here. In a notebook:

    import tracelake
    lake = tracelake.open_lake("lake")                    # or rev="HEAD~1"
    lake.scan("pool").filter(pl.col("n_tokens") > 8000).collect()
"""

__version__ = "0.1.0"


def open_lake(path="lake", rev=None, root="."):
    """The lake at `path` read-only (with `rev`: as that git revision recorded it, `path` inside the
    repository at `root`): `.sql(query)` gives DuckDB relations, `.scan(view)` Polars LazyFrames over
    the views of `tracelake sql`. See tracelake.explore.notebook."""
    from tracelake.explore.notebook import open_lake as open_notebook_lake

    return open_notebook_lake(path, rev=rev, root=root)
