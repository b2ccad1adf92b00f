"""Curate: from ingested rollouts to one dataset per scale.

- scorers.py  the Scorer interface and the built-in scorers (versioned names)
- score.py    running scorers through the score cache; imported scores
- filter.py   the rollout filters (sql/filter_rules/, one versioned rule each) and the funnel
- apportion.py, select.py  largest-remainder upsampling by score, source mixing, one selection per scale
- report.py   per-scale composition: DVC metrics and plots
- params.py   params.yaml `score`, `filter`, `mix`, `select`
"""
