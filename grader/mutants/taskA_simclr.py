"""Plausible wrong answers for Task A (SimCLR); every one must lose points in the autograde.

``grayscale`` in the ``colour_distort`` cell is given code (outside the solution block), so its
mistakes are mutants of ``colour_distort`` (the wrong luma weights live in ``to_gray`` there).
"""

from grader.mutants import Mutant

_DRAW = "u = torch.rand(n, generator=generator, device=where).to(images.device, images.dtype)"
_DRAW_SHARED = "u = torch.rand(1, generator=generator, device=where).expand(n).to(images.device, images.dtype)"
_DRAW_GLOBAL = "u = torch.rand(n, device=where).to(images.device, images.dtype)"
_OWN_GENERATOR = "\n    generator = torch.Generator().manual_seed(0)"

# random_resized_crop_flip
_RC_SHAPE = "    n, _, height, width = images.shape\n"
_RC_FLIP_THETA = "theta[:, 0, 0] = torch.where(flip, -crop_w, crop_w)"
_RC_THETA = """theta[:, 0, 0] = torch.where(flip, -crop_w, crop_w)
    theta[:, 0, 2] = centre_x
    theta[:, 1, 1] = crop_h"""
_RC_AREA = "area = uniform(*scale)"
_RC_ASPECT = "aspect = torch.exp(uniform(math.log(ratio[0]), math.log(ratio[1])))"
_RC_CX = "centre_x = (crop_w / 2 + uniform(0, 1) * (1 - crop_w)) * 2 - 1        # normalised to [-1, 1]"
_RC_FLIP = "flip = uniform(0, 1) < flip_p"

# colour_distort
_CD_N = "    n = images.shape[0]\n"
_CD_JIT = "jittered = uniform(0, 1) < jitter_p"
_CD_GRAY = "gray = (uniform(0, 1) < gray_p).view(n, 1, 1)"
_CD_TO_GRAY = "to_gray = torch.tensor([[0.299, 0.587, 0.114]], device=dev, dtype=torch.float64).expand(3, 3)"
_CD_OFFSET = "offset = (1 - c) * b * mean_gray * torch.ones(n, 3, 1, device=dev, dtype=torch.float64)"
_CD_RET = "return out.clamp_(0, 1).view_as(images)"

# nt_xent_loss_loop
_NL_SIMS = "sims = F.cosine_similarity(z[i].unsqueeze(0), z, dim=1) / temperature   # [2N]: s_ik / tau"
_NL_OTHERS = "others = torch.cat([sims[:i], sims[i + 1:]])                              # every k != i"
_NL_TOTAL = "total = total + torch.logsumexp(others, dim=0) - sims[(i + n) % (2 * n)]"
_NL_RET = "return total / (2 * n)"

# nt_xent_loss
_NT_MASK = 'logits = logits.masked_fill(self_mask, float("-inf"))'
_NT_PARTNER = "partner = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)"
_NT_NORM = "z = F.normalize(torch.cat([z1, z2]), dim=1)"
_NT_LOGITS = "logits = z @ z.T / temperature"
_NT_RET = "return F.cross_entropy(logits, partner)"

# ProjectionHead
_PH_RELU = "            nn.ReLU(inplace=True),\n"
_PH_OUT = "            nn.Linear(hidden_dim, out_dim),\n"
_PH_BN = "            nn.BatchNorm1d(hidden_dim),\n"
_PH_BN_RELU = """            nn.BatchNorm1d(hidden_dim),
            nn.ReLU(inplace=True),
"""
_PH_FWD = "return self.net(h)"

# simclr_train_step
_ST_VIEWS = "views = torch.cat([augment(images, generator), augment(images, generator)])"
_ST_FWD = "z = head(encoder(views))"
_ST_SPLIT = "z1, z2 = z.float().chunk(2)"
_ST_LOSS = "loss = nt_xent_loss(z1, z2, temperature)"
_ST_ZERO = "    optimizer.zero_grad(set_to_none=True)\n"
_ST_STEP = "    optimizer.step()\n"
_ST_RET = "return loss.detach()"
_ST_ORDER = """    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
"""

# linear_probe_accuracy
_LP_LOSS = "loss = F.cross_entropy(probe(x_train[idx]), train_labels[idx])"
_LP_STATS = "mean, std = train_feats.float().mean(0), train_feats.float().std(0) + 1e-6"
_LP_X = "x_train, x_test = (train_feats.float() - mean) / std, (test_feats.float() - mean) / std"
_LP_RET = "return float((predictions == test_labels.to(predictions.device)).float().mean())"
_LP_CHECK = """    if (train_feats.dim() != 2 or test_feats.dim() != 2 or train_feats.shape[1] != test_feats.shape[1]
            or len(train_feats) != len(train_labels) or len(test_feats) != len(test_labels)):
        raise ValueError(
            f"expected train [N, d] with N labels and test [M, d] with M labels, got {tuple(train_feats.shape)}, "
            f"{tuple(train_labels.shape)}, {tuple(test_feats.shape)}, {tuple(test_labels.shape)}")
"""
_LP_PRED = "predictions = probe(x_test).argmax(1)"

# knn_accuracy
_KN_NORM = """bank = F.normalize(train_feats.float(), dim=1)
    queries = F.normalize(test_feats.float(), dim=1).to(bank.device)"""
_KN_SIM = "sim = queries[start:start + batch_size] @ bank.T                   # [b, N]"
_KN_TOPK = "neighbours = sim.topk(k, dim=1).indices                             # [b, k]"
_KN_PRED = "predicted = votes.argmax(dim=1)"
_KN_K = """    if not 1 <= k <= len(train_feats):
        raise ValueError(f"k must be between 1 and the number of training points ({len(train_feats)}), got {k}")
"""

MUTANTS = [
    # ------------------------------------------------------------------ random_resized_crop_flip
    Mutant(cell="random_resized_crop_flip", name="transforms.v2 on the batch: one crop and flip for all images",
           find=_RC_SHAPE, replace=_RC_SHAPE + "    from torchvision.transforms import v2\n"
           "    return v2.Compose([v2.RandomResizedCrop(size, scale=scale, ratio=ratio, antialias=True),\n"
           "                       v2.RandomHorizontalFlip(flip_p)])(images)\n"),
    Mutant(cell="random_resized_crop_flip", name="one set of random parameters for the whole batch",
           find=_DRAW, replace=_DRAW_SHARED),
    Mutant(cell="random_resized_crop_flip", name="no flip",
           find=_RC_FLIP_THETA, replace="theta[:, 0, 0] = crop_w"),
    Mutant(cell="random_resized_crop_flip", name="vertical instead of horizontal flip",
           find=_RC_THETA, replace="theta[:, 0, 0] = crop_w\n    theta[:, 0, 2] = centre_x\n"
                                   "    theta[:, 1, 1] = torch.where(flip, -crop_h, crop_h)"),
    Mutant(cell="random_resized_crop_flip", name="scale range hard-coded to torchvision's (0.08, 1)",
           find=_RC_AREA, replace="area = uniform(0.08, 1.0)"),
    Mutant(cell="random_resized_crop_flip", name="scale read as a side fraction, not an area",
           find=_RC_AREA, replace="area = uniform(*scale) ** 2"),
    Mutant(cell="random_resized_crop_flip", name="aspect ratio uniform instead of log-uniform",
           find=_RC_ASPECT, replace="aspect = uniform(*ratio)"),
    Mutant(cell="random_resized_crop_flip", name="crop centre anywhere (crops leave the image)",
           find=_RC_CX, replace="centre_x = uniform(-1, 1)"),
    Mutant(cell="random_resized_crop_flip", name="flip probability inverted",
           find=_RC_FLIP, replace="flip = uniform(0, 1) > flip_p"),
    Mutant(cell="random_resized_crop_flip", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_RC_SHAPE, replace=_RC_SHAPE.rstrip("\n") + _OWN_GENERATOR + "\n"),
    Mutant(cell="random_resized_crop_flip", name="draws from torch's global random state (no generator=)",
           find=_DRAW, replace=_DRAW_GLOBAL),
    # ------------------------------------------------------------------ colour_distort
    Mutant(cell="colour_distort", name="one set of jitter factors for the whole batch",
           find=_DRAW, replace=_DRAW_SHARED),
    Mutant(cell="colour_distort", name="jitter applied always (no probability)",
           find=_CD_JIT, replace="jittered = torch.ones(n, 1, 1, 1, dtype=torch.bool, device=images.device)"),
    Mutant(cell="colour_distort", name="grayscale as the plain channel mean (wrong weights)",
           find=_CD_TO_GRAY, replace="to_gray = torch.full((3, 3), 1 / 3, device=dev, dtype=torch.float64)"),
    Mutant(cell="colour_distort", name="grayscale probability inverted",
           find=_CD_GRAY, replace="gray = (uniform(0, 1) > gray_p).view(n, 1, 1)"),
    Mutant(cell="colour_distort", name="contrast around mid-gray 0.5 instead of the image's mean gray",
           find=_CD_OFFSET, replace="offset = (1 - c) * b * 0.5 * torch.ones(n, 3, 1, device=dev, dtype=torch.float64)"),
    Mutant(cell="colour_distort", name="no clamp to [0, 1]",
           find=_CD_RET, replace="return out.view_as(images)"),
    Mutant(cell="colour_distort", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_CD_N, replace=_CD_N.rstrip("\n") + _OWN_GENERATOR + "\n"),
    Mutant(cell="colour_distort", name="draws from torch's global random state (no generator=)",
           find=_DRAW, replace=_DRAW_GLOBAL),
    # ------------------------------------------------------------------ nt_xent_loss_loop
    Mutant(cell="nt_xent_loss_loop", name="self-similarity kept in the denominator",
           find=_NL_OTHERS, replace="others = sims"),
    Mutant(cell="nt_xent_loss_loop", name="positive left out of the denominator (negatives only)",
           find=_NL_OTHERS, replace="others = torch.cat([sims[k:k + 1] for k in range(2 * n) if k not in (i, (i + n) % (2 * n))])"),
    Mutant(cell="nt_xent_loss_loop", name="partner at i + 1 instead of i + N",
           find=_NL_TOTAL, replace="total = total + torch.logsumexp(others, dim=0) - sims[(i + 1) % (2 * n)]"),
    Mutant(cell="nt_xent_loss_loop", name="dot product instead of cosine similarity",
           find=_NL_SIMS, replace="sims = (z @ z[i]) / temperature"),
    Mutant(cell="nt_xent_loss_loop", name="no temperature",
           find=_NL_SIMS, replace="sims = F.cosine_similarity(z[i].unsqueeze(0), z, dim=1)"),
    Mutant(cell="nt_xent_loss_loop", name="sum over 2N anchors divided by N",
           find=_NL_RET, replace="return total / n"),
    Mutant(cell="nt_xent_loss_loop", name="only the N anchors of z1",
           find="for i in range(2 * n):", replace="for i in range(n):"),
    Mutant(cell="nt_xent_loss_loop", name="the loss computed in float64 and returned as float64",
           find=_NL_RET, replace="return (total / (2 * n)).double()"),
    Mutant(cell="nt_xent_loss_loop", name="Python floats (no gradient)",
           find=_NL_RET, replace="return torch.tensor(float(total / (2 * n)), dtype=z1.dtype)"),
    # ------------------------------------------------------------------ nt_xent_loss
    Mutant(cell="nt_xent_loss", name="no self-mask (a view is its own negative)",
           find=_NT_MASK, replace="logits = logits"),
    Mutant(cell="nt_xent_loss", name="positive at i + 1 instead of i + N",
           find=_NT_PARTNER, replace="partner = ((torch.arange(2 * n) + 1) % (2 * n)).to(z.device)"),
    Mutant(cell="nt_xent_loss", name="no normalisation (dot product, not cosine)",
           find=_NT_NORM, replace="z = torch.cat([z1, z2])"),
    Mutant(cell="nt_xent_loss", name="no temperature",
           find=_NT_LOGITS, replace="logits = z @ z.T"),
    Mutant(cell="nt_xent_loss", name="sum over 2N divided by N",
           find=_NT_RET, replace='return F.cross_entropy(logits, partner, reduction="sum") / n'),
    Mutant(cell="nt_xent_loss", name="only the N views of z1 as anchors",
           find=_NT_RET, replace="return F.cross_entropy(logits[:n], partner[:n])"),
    Mutant(cell="nt_xent_loss", name="self-similarity masked with 0 instead of -inf",
           find=_NT_MASK, replace="logits = logits.masked_fill(self_mask, 0.0)"),
    Mutant(cell="nt_xent_loss", name="normalised over the batch axis",
           find=_NT_NORM, replace="z = F.normalize(torch.cat([z1, z2]), dim=0)"),
    # ------------------------------------------------------------------ ProjectionHead
    Mutant(cell="projection_head", name="no nonlinearity",
           find=_PH_RELU, replace=""),
    Mutant(cell="projection_head", name="output dimension in_dim instead of out_dim",
           find=_PH_OUT, replace="            nn.Linear(hidden_dim, in_dim),\n"),
    Mutant(cell="projection_head", name="no BatchNorm",
           find=_PH_BN, replace=""),
    Mutant(cell="projection_head", name="ReLU after the last layer too",
           find=_PH_OUT, replace="            nn.Linear(hidden_dim, out_dim),\n            nn.ReLU(),\n"),
    Mutant(cell="projection_head", name="ReLU before BatchNorm",
           find=_PH_BN_RELU, replace="            nn.ReLU(inplace=True),\n            nn.BatchNorm1d(hidden_dim),\n"),
    Mutant(cell="projection_head", name="forward L2-normalises the output",
           find=_PH_FWD, replace="return F.normalize(self.net(h), dim=1)"),
    # ------------------------------------------------------------------ simclr_train_step
    Mutant(cell="simclr_train_step", name="no zero_grad (gradients accumulate)",
           find=_ST_ZERO, replace=""),
    Mutant(cell="simclr_train_step", name="no optimizer.step()",
           find=_ST_STEP, replace=""),
    Mutant(cell="simclr_train_step", name="returns the loss with its graph",
           find=_ST_RET, replace="return loss"),
    Mutant(cell="simclr_train_step", name="two separate forward passes (BatchNorm statistics per view)",
           find=_ST_FWD, replace="z = torch.cat([head(encoder(half)) for half in views.chunk(2)])"),
    Mutant(cell="simclr_train_step", name="the same view twice (augment called once)",
           find=_ST_VIEWS, replace="view = augment(images, generator)\n    views = torch.cat([view, view])"),
    Mutant(cell="simclr_train_step", name="temperature not passed on",
           find=_ST_LOSS, replace="loss = nt_xent_loss(z1, z2)"),
    Mutant(cell="simclr_train_step", name="step before backward",
           find=_ST_ORDER, replace="    optimizer.zero_grad(set_to_none=True)\n    optimizer.step()\n    loss.backward()\n"),
    Mutant(cell="simclr_train_step", name="second view detached (no gradient through it)",
           find=_ST_SPLIT, replace="z1, z2 = z.float().chunk(2)\n    z2 = z2.detach()"),
    Mutant(cell="simclr_train_step", name="views from generators of its own (fixed seeds), ignores the given one",
           find=_ST_VIEWS, replace="views = torch.cat([augment(images, torch.Generator().manual_seed(0)), "
                                   "augment(images, torch.Generator().manual_seed(1))])"),
    Mutant(cell="simclr_train_step", name="generator not passed on: augment draws from the global random state",
           find=_ST_VIEWS, replace="views = torch.cat([augment(images), augment(images)])"),
    # ------------------------------------------------------------------ linear_probe_accuracy
    Mutant(cell="linear_probe_accuracy", name="trains on the test features and labels",
           find=_LP_LOSS, replace="loss = F.cross_entropy(probe(x_test[idx % len(x_test)]), "
                                  "test_labels.to(x_test.device)[idx % len(x_test)])"),
    Mutant(cell="linear_probe_accuracy", name="no standardisation",
           find=_LP_STATS, replace="mean, std = 0.0, 1.0"),
    Mutant(cell="linear_probe_accuracy", name="returns a tensor instead of a float",
           find=_LP_RET, replace="return (predictions == test_labels.to(predictions.device)).float().mean()"),
    Mutant(cell="linear_probe_accuracy", name="standardises the caller's features in place",
           find=_LP_X, replace="x_train, x_test = train_feats.float().sub_(mean).div_(std), (test_feats.float() - mean) / std"),
    Mutant(cell="linear_probe_accuracy", name="no input validation",
           find=_LP_CHECK, replace=""),
    Mutant(cell="linear_probe_accuracy", name="scores the training predictions",
           find=_LP_PRED, replace="predictions = probe(x_train).argmax(1)[:len(x_test)]"),
    Mutant(cell="linear_probe_accuracy", name="one epoch whatever epochs says",
           find="for _ in range(epochs):", replace="for _ in range(1):"),
    # ------------------------------------------------------------------ knn_accuracy
    Mutant(cell="knn_accuracy", name="dot product without normalising",
           find=_KN_NORM, replace="bank = train_feats.float()\n    queries = test_feats.float().to(bank.device)"),
    Mutant(cell="knn_accuracy", name="Euclidean distance instead of cosine",
           find=_KN_SIM, replace="sim = -torch.cdist(test_feats.float()[start:start + batch_size].to(bank.device), "
                                 "train_feats.float().to(bank.device))  # [b, N]"),
    Mutant(cell="knn_accuracy", name="drops the nearest neighbour as if it were the query itself",
           find=_KN_TOPK, replace="neighbours = sim.topk(k + 1, dim=1).indices[:, 1:]"),
    Mutant(cell="knn_accuracy", name="k ignored (always 20)",
           find=_KN_TOPK, replace="neighbours = sim.topk(min(20, len(bank)), dim=1).indices"),
    Mutant(cell="knn_accuracy", name="the nearest neighbour's label instead of the majority",
           find=_KN_PRED, replace="predicted = train_labels[neighbours[:, 0]]"),
    Mutant(cell="knn_accuracy", name="the k least similar points",
           find=_KN_TOPK, replace="neighbours = sim.topk(k, dim=1, largest=False).indices"),
    Mutant(cell="knn_accuracy", name="no check of k",
           find=_KN_K, replace=""),
]
