"""The tag protocols a run can speak, one module each: its tags, how its episodes are parsed, its format rules.

R1-Searcher's, the default, is `r1_searcher.py`; Search-R1's is `search_r1.py`.
"""
