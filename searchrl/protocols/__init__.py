"""The tag protocols a run can speak, one module each: its tags, how its episodes are parsed, its format rules.

R1-Searcher's, the default, is `searchrl/protocol.py` (it moves here with the next rebuild of the tiny policy's warm
start, whose input hash covers that file). Search-R1's is `search_r1.py`.
"""
