"""The programs tier: MaxText 0.2.4's real programs run on what rlpipe renders (docs/programs.md).

``make programs`` builds the tier's interpreter (``venv.sh``) and runs each part (``run``); the tests
read what the parts stored, by key (``parts``, ``tests/harness/programs.py``).
"""
