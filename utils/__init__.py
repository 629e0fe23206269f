"""Shared helpers for the 'Learning at Scale' course pack (Exercise Session 1).

One module per concern, imported explicitly by the notebooks:

- ``utils.device``        device selection (cuda, mps, cpu) and seeding
- ``utils.presets``       the smoke / cpu / gpu / full presets every notebook's parameters cell picks from
- ``utils.notebook_presets`` what each preset runs in each notebook (one table per notebook)
- ``utils.plotting``      one plotting style for the whole pack, and ``save_figure`` into build/figures/
- ``utils.data``          CIFAR-10 and the text corpora shipped in data/
- ``utils.paths``         where the repository, data/ and build/ are
- ``utils.vision``        Task A's encoders, feature extraction, checkpoints and training loop
- ``utils.lm``            Tasks 2 and B: loading hub or miniature models, the MODEL_SUITE switch
- ``utils.tokenizer``     Pythia's GPT-NeoX-20B tokenizer (shipped in data/), for the loaders and the suite's build
- ``utils.scaling``       Task B: Pythia's configs, the checkpoint sweep and its results cache, fits
- ``utils.suite_recipes``, ``utils.suite_training``, ``utils.suite_build``
                          the miniature model suite: its recipes, its training, its cached build
- ``utils.distributed``   torchrun plumbing: process groups, an all-gather that keeps gradients, sharding
- ``utils.run_notebooks`` the main job: execute every notebook into build/notebooks/
- ``utils.notebook_cells`` the cell model: a cell's source, metadata, tags and role, stable notebook JSON
- ``utils.answer_loader``, ``utils.validate`` the grader's view of a notebook (``./pack.sh validate``)
- ``utils.hosted_install`` a setup cell on a hosted notebook (Colab, ...): its bootstrap text, unpacking the
                          pack and installing its pinned requirements

Nothing here is graded: students implement the ideas of each task in the notebooks, and a test of the
course repository (not part of the student bundle) checks that no solution block appears in any file a
student receives.
"""

__all__ = ["device", "presets", "plotting", "data", "paths", "vision", "lm", "scaling", "suite_recipes",
           "suite_training", "suite_build", "distributed", "run_notebooks", "notebook_cells", "tokenizer"]
