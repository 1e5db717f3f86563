"""Figures, live widgets (ipywidgets 7.6+ and 8), their kernel-free twins, diagrams and tables."""
