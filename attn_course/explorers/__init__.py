"""Interactive explorers (ipywidgets) of the notebooks, one module per notebook topic."""
