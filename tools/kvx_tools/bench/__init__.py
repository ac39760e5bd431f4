"""The end-to-end benchmark (e2e_speed.py), its peers (run_*.py), tables and figures, and smaller speed checks."""
