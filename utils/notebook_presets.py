"""What each preset runs in each notebook: one table per notebook, ``{preset: {setting: value}}``.

A notebook's setup cell picks its row with ``preset, cfg = notebook_config("<notebook>", PRESET)``
(utils/presets.py), so ``cfg.<setting>`` below is what the notebook reads. Every row of a table has the
same keys (checked when the row is picked); a table without ``full`` runs ``gpu`` for it. A setting is
changed here: the notebooks only name their table.
"""

from __future__ import annotations

from .scaling import PYTHIA_DEFAULT_SIZES

TASK1_INFONCE = {
    # n_anchors: anchors per K when estimating the bound; critic_steps: training steps of the learned critic;
    # curve_*: the critics trained with K negatives each whose bound is plotted over their training steps;
    # ratio_*: the NCE / unshifted NCE / InfoNCE critics whose scores are compared with the true log ratio;
    # cos_*: the cosine critics trained with InfoNCE at each temperature in cos_taus
    "smoke": dict(dim=5, rho=0.8, max_log2_k=8, n_anchors=256, critic_steps=150, critic_batch=128,
                  curve_ks=[1, 15, 255], curve_steps=100, curve_batch=32,
                  ratio_dim=2, ratio_k=15, ratio_steps=300, ratio_batch=64,
                  cos_taus=[2.0, 1.0, 0.5], cos_k=255, cos_steps=150, cos_batch=32),
    "cpu":   dict(dim=5, rho=0.8, max_log2_k=10, n_anchors=2048, critic_steps=2000, critic_batch=256,
                  curve_ks=[1, 15, 255], curve_steps=800, curve_batch=128,
                  ratio_dim=2, ratio_k=15, ratio_steps=1500, ratio_batch=128,
                  cos_taus=[4.0, 2.0, 1.0, 0.5, 0.25, 0.1], cos_k=255, cos_steps=600, cos_batch=64),
    "gpu":   dict(dim=5, rho=0.8, max_log2_k=10, n_anchors=4096, critic_steps=4000, critic_batch=512,
                  curve_ks=[1, 15, 255], curve_steps=1500, curve_batch=256,
                  ratio_dim=2, ratio_k=15, ratio_steps=3000, ratio_batch=256,
                  cos_taus=[4.0, 2.0, 1.0, 0.5, 0.25, 0.1], cos_k=255, cos_steps=1500, cos_batch=128),
}


TASK2_PSEUDO_LIKELIHOOD = {
    # suite: miniature suite when offline; passage_tokens: tokens per scored passage (AR tokenizer);
    # batch_size: masked copies per forward pass; mc_masks / n_estimates: Monte-Carlo sample sizes
    "smoke": dict(suite="micro", passage_tokens=32, n_passages=2, batch_size=16, mc_masks=2000,
                  n_estimates=64, masks_per_q=8, pattern_tokens=8,
                  hub_masked="bert-base-uncased", hub_causal="EleutherAI/pythia-70m"),
    "cpu":   dict(suite="small", passage_tokens=96, n_passages=5, batch_size=16, mc_masks=20000,
                  n_estimates=400, masks_per_q=256, pattern_tokens=12,
                  hub_masked="bert-base-uncased", hub_causal="EleutherAI/pythia-160m"),
    "gpu":   dict(suite="default", passage_tokens=120, n_passages=24, batch_size=64, mc_masks=50000,
                  n_estimates=10000, masks_per_q=512, pattern_tokens=16,
                  hub_masked="bert-base-uncased", hub_causal="EleutherAI/pythia-1.4b"),
}


TASKA_SIMCLR = {
    # encoder: "tiny_cnn" / "small_cnn" (CPU) or "resnet18" (CIFAR stem); n_train: images SimCLR trains on;
    # lr: SGD learning rate at the top of the warm-up + cosine schedule; probe_train: images whose
    # features train the linear probe; knn_*: the kNN monitor run during training (every knn_every
    # epochs); compile: torch.compile the encoder (off: compiling costs minutes up front);
    # resume: checkpoint every epoch and pick up from build/cache/simclr (smoke always trains afresh);
    # threads: torch CPU threads (smoke: 1, its tensors are too small to gain from more; None: default);
    # ablation_*: the short runs of the temperature x batch-size table; aug_ablation_*: the augmentation
    # ablation (crop only / colour only / both): images and epochs of each run, and images whose features
    # train its probes.
    "smoke": dict(encoder="tiny_cnn", n_train=384, n_test=256, epochs=2, batch_size=64, lr=0.15,
                  temperature=0.5, crop_size=32, autocast=None, channels_last=False,
                  supervised_epochs=2, probe_train=384, probe_epochs=30, knn_k=20, knn_bank=384,
                  knn_queries=256, knn_every=1, compile=False, resume=False, threads=1, tsne_points=150,
                  tsne_iter=250, ablation_temperatures=(0.5,),
                  ablation_batch_sizes=(32, 64), ablation_epochs=1, ablation_n_train=128,
                  aug_ablation_n_train=128, aug_ablation_epochs=1, aug_ablation_probe_train=384),
    # cpu: all 50,000 training images for 10 epochs on 16x16 crops in channels-last layout (a 16x16 view
    # costs a CPU about a third of a 32x32 one in NCHW; features for the probe and kNN still come from the
    # full 32x32 images), temperature 0.2 (better than 0.5 after a few epochs) and the probe trained on all
    # 50,000 training images for 30 epochs (60 gave the same accuracy to 0.1 point).
    # SimCLR's linear probe in runs of the SimCLR cell alone (2 cores, 2026-11-27): 10 epochs of 16x16 crops
    # 65.2 % in 282 s of training; 10 of 14x14 64.0 % in 258 s; 7 of 16x16 63.7 % in 217 s; 5 of 20x20
    # 62.5 % in 241 s; 4 of 24x24 62.0 % in about 300 s. Not better: temperature 0.5 (58.7 % at 5 epochs of
    # 20x20), a warm-up of a quarter epoch instead of one (60.6 %), lr 0.15 (61.5 %), batch 128 at lr 0.15
    # (61.8 %, 30 % slower per image), the probe on features of 36x36 or 28x28 images (+0.7 / -0.5 points).
    # The supervised baseline trains 3 epochs (13 s each): 2 gave 64.2 %, below SimCLR's 65.2 %, which the
    # text calls roughly the ceiling; 3 give 66.4 %, 4 give 67.8 %.
    "cpu":   dict(encoder="small_cnn", n_train=50_000, n_test=10_000, epochs=10, batch_size=256,
                  lr=0.3, temperature=0.2, crop_size=16, autocast=None, channels_last=True,
                  supervised_epochs=3, probe_train=50_000, probe_epochs=30, knn_k=20,
                  knn_bank=5_000, knn_queries=1_000, knn_every=2, compile=False, resume=True, threads=None,
                  tsne_points=1_000,
                  tsne_iter=1000,
                  ablation_temperatures=(0.1, 0.5), ablation_batch_sizes=(64, 256),
                  ablation_epochs=1, ablation_n_train=4_000,
                  aug_ablation_n_train=8_000, aug_ablation_epochs=2, aug_ablation_probe_train=10_000),
    # gpu: the ten-minute lecture demo, planned to fit 9 minutes on one H100 at the speeds measured there on
    # 2026-11-27 (README, "Measured"): SimCLR with the given (kornia) augmentation 23,300 images/s, so 100 epochs
    # ~215 s plus ~20 s of kNN checks; supervised 15 epochs (~35 s), the temperature x batch table 4 runs x 3
    # epochs (~45 s), the augmentation ablation 3 runs x 10 epochs on 10,000 images (~30 s with its probes);
    # about 7.7 minutes in all, the rest is margin.
    "gpu":   dict(encoder="resnet18", n_train=50_000, n_test=10_000, epochs=100, batch_size=512,
                  lr=0.12, temperature=0.5, crop_size=32, autocast="bfloat16", channels_last=True,
                  supervised_epochs=15, probe_train=50_000, probe_epochs=100, knn_k=20,
                  knn_bank=10_000, knn_queries=2_000, knn_every=5, compile=False, resume=True, threads=None,
                  tsne_points=2_000,
                  tsne_iter=1000, ablation_temperatures=(0.1, 0.5), ablation_batch_sizes=(128, 512),
                  ablation_epochs=3, ablation_n_train=50_000,
                  aug_ablation_n_train=10_000, aug_ablation_epochs=10, aug_ablation_probe_train=10_000),
    "full":  dict(encoder="resnet18", n_train=50_000, n_test=10_000, epochs=1000, batch_size=512,
                  lr=0.12, temperature=0.5, crop_size=32, autocast="bfloat16", channels_last=True,
                  supervised_epochs=200, probe_train=50_000, probe_epochs=100, knn_k=20,
                  knn_bank=50_000, knn_queries=10_000, knn_every=25, compile=False, resume=True, threads=None,
                  tsne_points=2_000,
                  tsne_iter=1000,
                  ablation_temperatures=(0.1, 0.5), ablation_batch_sizes=(128, 512),
                  ablation_epochs=100, ablation_n_train=50_000,
                  aug_ablation_n_train=50_000, aug_ablation_epochs=20, aug_ablation_probe_train=50_000),
}


TASKB_PYTHIA_SCALING = {
    # seconds on a CPU: the micro suite (3 sizes) on a slice of text
    "smoke": dict(mini_suite="micro", mini_checkpoints=3, mini_chars=1500,
                  pythia_sizes=["14m", "31m", "70m"], pythia_steps=[1000, 143000], max_documents=1,
                  batch_size=8, use_cache=False),
    # minutes on a laptop: the small miniature suite (4 sizes; its first build takes about 3 minutes),
    # or small Pythia models on a few articles
    "cpu": dict(mini_suite="small", mini_checkpoints=10, mini_chars=40_000,
                pythia_sizes=["14m", "31m", "70m", "160m"], pythia_steps=[256, 1000, 4000, 16000, 66000, 143000],
                max_documents=6, batch_size=4, use_cache=True),
    # the lecture demo: Pythia 14m to 1.4b at 10 checkpoints on all of WikiText-2 test
    "gpu": dict(mini_suite="default", mini_checkpoints=12, mini_chars=None,
                pythia_sizes=list(PYTHIA_DEFAULT_SIZES),
                pythia_steps=[64, 256, 1000, 2000, 4000, 8000, 16000, 33000, 66000, 143000],
                max_documents=None, batch_size=8, use_cache=True),
}


BONUS_MASKED_PRETRAINING_BAYES = {
    # D, K, sigma2: the PPCA model; n_data: samples; masks_grid: masks per mask size in the convergence
    # study (repeated n_repeats times); curve_masks: masks per m for the S(x; m) curve; landscape_*:
    # grid points and masks per m of the objective landscapes; fit_*: gradient-ascent fits.
    "smoke": dict(D=6, K=2, sigma2=0.1, n_data=200, masks_grid=[2, 4, 8, 16, 32, 64], n_repeats=4,
                  curve_masks=64, landscape_points=11, landscape_masks=8,
                  fit_steps=120, fit_masks=2, fit_lr=0.1),
    "cpu":   dict(D=10, K=3, sigma2=0.1, n_data=1000, masks_grid=[2, 4, 8, 16, 32, 64, 128], n_repeats=8,
                  curve_masks=400, landscape_points=21, landscape_masks=32,
                  fit_steps=200, fit_masks=3, fit_lr=0.1),
    "gpu":   dict(D=10, K=3, sigma2=0.1, n_data=1000, masks_grid=[2, 4, 8, 16, 32, 64, 128], n_repeats=8,
                  curve_masks=400, landscape_points=21, landscape_masks=32,
                  fit_steps=200, fit_masks=3, fit_lr=0.1),
}

#: The tables by notebook (the stem of solutions/ex01/<stem>.ipynb).
TABLES = {"task1_infonce": TASK1_INFONCE, "task2_pseudo_likelihood": TASK2_PSEUDO_LIKELIHOOD,
          "taskA_simclr": TASKA_SIMCLR, "taskB_pythia_scaling": TASKB_PYTHIA_SCALING,
          "bonus_masked_pretraining_bayes": BONUS_MASKED_PRETRAINING_BAYES}
