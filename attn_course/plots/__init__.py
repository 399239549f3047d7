"""Figures the notebooks draw, one module per notebook topic (`plots/masking.py` serves 03_causal_masking)."""
