"""Shared helpers for the 'Learning at Scale' course pack (Exercise Session 1).

One module per concern, imported explicitly by the notebooks:

- ``utils.device``   device selection (cuda, mps, cpu) and seeding
- ``utils.presets``  the smoke / cpu / gpu / full presets every notebook's parameters cell picks from
- ``utils.plotting`` one plotting style for the whole pack, and ``save_figure`` into build/figures/
- ``utils.data``     CIFAR-10 and the text corpora shipped in data/
- ``utils.paths``    where the repository, data/ and build/ are

Nothing here is graded: students implement the ideas of each task in the notebooks.
"""

__all__ = ["device", "presets", "plotting", "data", "paths"]
