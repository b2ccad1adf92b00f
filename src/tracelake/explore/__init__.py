"""Explore: read what the pipeline built; nothing here writes to the lake.

- sql.py        `tracelake sql`: read-only DuckDB views over every table and dataset
- diff.py       `tracelake diff`: two versions row by row, each move explained (diff_terminal.py: terminal,
                diff_html.py + svg.py: the HTML report)
- show.py       `tracelake show`: one trajectory
- status.py     `tracelake status` and `tracelake schema`
"""
