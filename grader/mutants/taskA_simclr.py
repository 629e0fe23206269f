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
_RC_CHECK = """    if images.dim() != 4 or images.shape[1] != 3 or not images.is_floating_point():
        raise ValueError(f"images must be a float tensor [N, 3, H, W], got {images.dtype} {tuple(images.shape)}")
"""
_RC_FLIP_THETA = "theta[:, 0, 0] = torch.where(flip, -crop_w, crop_w)"
_RC_THETA = """theta[:, 0, 0] = torch.where(flip, -crop_w, crop_w)
    theta[:, 0, 2] = centre_x
    theta[:, 1, 1] = crop_h"""
_RC_DRAW = "u = torch.rand(n, tries, generator=generator, device=where).to(images.device, images.dtype)"
_RC_DRAW_SHARED = ("u = torch.rand(1, tries, generator=generator, device=where).expand(n, tries)"
                   ".to(images.device, images.dtype)")
_RC_DRAW_GLOBAL = "u = torch.rand(n, tries, device=where).to(images.device, images.dtype)"
_RC_AREA = "area = uniform(*scale, tries=tries)"
_RC_ASPECT = "aspect = torch.exp(uniform(math.log(ratio[0]), math.log(ratio[1]), tries=tries))"
_RC_CX = "where_x = torch.where(none_fit, 0.5, uniform(0, 1))                   # position within the free room"
_RC_TRIES = "tries = 10"
_RC_REDRAW = """    fits = (widths <= 1) & (heights <= 1)
    first = fits.int().argmax(dim=1, keepdim=True)                        # the first that fits
    crop_w, crop_h = widths.gather(1, first).squeeze(1), heights.gather(1, first).squeeze(1)
"""
_RC_CLIPPED = """    fits = torch.ones_like(widths, dtype=torch.bool)
    crop_w, crop_h = widths[:, 0].clamp(max=1.0), heights[:, 0].clamp(max=1.0)
"""
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
_NT_MASK = 'logits = (z @ z.T / temperature).masked_fill(torch.eye(2 * n, dtype=torch.bool, device=z.device), float("-inf"))'
_NT_PARTNER = "partner = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)"
_NT_NORM = "z = F.normalize(torch.cat([z1, z2]), dim=1)"
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
_LP_RET = "return float((logits.argmax(1) == test_labels.to(logits.device)).float().mean())"
_LP_CHECK = """    if (train_feats.dim() != 2 or test_feats.dim() != 2 or train_feats.shape[1] != test_feats.shape[1]
            or len(train_feats) != len(train_labels) or len(test_feats) != len(test_labels)):
        raise ValueError(
            f"expected train [N, d] with N labels and test [M, d] with M labels, got {tuple(train_feats.shape)}, "
            f"{tuple(train_labels.shape)}, {tuple(test_feats.shape)}, {tuple(test_labels.shape)}")
"""

# knn_accuracy
_KN_NORM = """bank = F.normalize(train_feats.float(), dim=1)
    queries = F.normalize(test_feats.float(), dim=1).to(bank.device)"""
_KN_TOPK = "neighbours = (queries[start:start + batch_size] @ bank.T).topk(k, dim=1).indices   # [b, k]"
_KN_PRED = "predicted.append(votes.argmax(dim=1).cpu())"

MUTANTS = [
    # ------------------------------------------------------------------ random_resized_crop_flip
    Mutant(cell="random_resized_crop_flip", name="transforms.v2 on the batch: one crop and flip for all images",
           find=_RC_SHAPE, replace=_RC_SHAPE + "    from torchvision.transforms import v2\n"
           "    return v2.Compose([v2.RandomResizedCrop(size, scale=scale, ratio=ratio, antialias=True),\n"
           "                       v2.RandomHorizontalFlip(flip_p)])(images)\n",
           visible=True, case="crop_independent"),
    Mutant(cell="random_resized_crop_flip", name="one set of random parameters for the whole batch",
           find=_RC_DRAW, replace=_RC_DRAW_SHARED,
           visible=True, case="crop_independent, augment_independent"),
    Mutant(cell="random_resized_crop_flip", name="no flip",
           find=_RC_FLIP_THETA, replace="theta[:, 0, 0] = crop_w",
           visible=True, case="crop_identity_and_mirror"),
    Mutant(cell="random_resized_crop_flip", name="vertical instead of horizontal flip",
           find=_RC_THETA, replace="theta[:, 0, 0] = crop_w\n    theta[:, 0, 2] = centre_x\n"
                                   "    theta[:, 1, 1] = torch.where(flip, -crop_h, crop_h)",
           visible=True, case="crop_flip_reverses"),
    Mutant(cell="random_resized_crop_flip", name="scale range hard-coded to torchvision's (0.08, 1)",
           find=_RC_AREA, replace="area = uniform(0.08, 1.0, tries=tries)",
           visible=True, case="crop_geometry"),
    Mutant(cell="random_resized_crop_flip", name="scale read as a side fraction, not an area",
           find=_RC_AREA, replace="area = uniform(*scale, tries=tries) ** 2",
           visible=True, case="crop_geometry"),
    Mutant(cell="random_resized_crop_flip", name="aspect ratio uniform instead of log-uniform",
           find=_RC_ASPECT, replace="aspect = uniform(*ratio, tries=tries)",
           visible=True, case="crop_log_aspect"),
    Mutant(cell="random_resized_crop_flip", name="crop centre anywhere (crops leave the image)",
           find=_RC_CX, replace="where_x = torch.where(none_fit, 0.5, uniform(-1, 2))",
           visible=True, case="crop_geometry"),
    Mutant(cell="random_resized_crop_flip", name="flip probability inverted",
           find=_RC_FLIP, replace="flip = uniform(0, 1) > flip_p",
           visible=True, case="crop_flip_rate, augment_all_off"),
    Mutant(cell="random_resized_crop_flip", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_RC_SHAPE, replace=_RC_SHAPE.rstrip("\n") + _OWN_GENERATOR + "\n",
           visible=True, case="crop_generator"),
    Mutant(cell="random_resized_crop_flip", name="draws from torch's global random state (no generator=)",
           find=_RC_DRAW, replace=_RC_DRAW_GLOBAL,
           visible=True, case="crop_global_state, augment_global_state, augment_generator"),
    Mutant(cell="random_resized_crop_flip", name="output of the input's size (size ignored)",
           find="grid = F.affine_grid(theta, [n, 3, size, size], align_corners=False)",
           replace="grid = F.affine_grid(theta, [n, 3, height, width], align_corners=False)", visible=True,
           case="crop_shapes"),
    Mutant(cell="random_resized_crop_flip", name="a box that does not fit is clipped to the image, not drawn again",
           find=_RC_REDRAW, replace=_RC_CLIPPED, visible=True, case="crop_redraw", edge=True),
    Mutant(cell="random_resized_crop_flip", name="one try: a box that does not fit gives the whole image at once",
           find=_RC_TRIES, replace="tries = 1", visible=True, case="crop_redraw"),
    Mutant(cell="random_resized_crop_flip", name="no check of the input (one channel, uint8 accepted)",
           find=_RC_CHECK, replace="", visible=True, case="crop_rejects"),
    # ------------------------------------------------------------------ colour_distort
    Mutant(cell="colour_distort", name="one set of jitter factors for the whole batch",
           find=_DRAW, replace=_DRAW_SHARED,
           visible=True, case="colour_independent"),
    Mutant(cell="colour_distort", name="jitter applied always (no probability)",
           find=_CD_JIT, replace="jittered = torch.ones(n, 1, 1, 1, dtype=torch.bool, device=images.device)",
           visible=True, case="colour_jitter_rate"),
    Mutant(cell="colour_distort", name="grayscale as the plain channel mean (wrong weights)",
           find=_CD_TO_GRAY, replace="to_gray = torch.full((3, 3), 1 / 3, device=dev, dtype=torch.float64)",
           visible=True, case="colour_grayscale"),
    Mutant(cell="colour_distort", name="grayscale probability inverted",
           find=_CD_GRAY, replace="gray = (uniform(0, 1) > gray_p).view(n, 1, 1)",
           visible=True, case="colour_gray_rate"),
    Mutant(cell="colour_distort", name="contrast around mid-gray 0.5 instead of the image's mean gray",
           find=_CD_OFFSET, replace="offset = (1 - c) * b * 0.5 * torch.ones(n, 3, 1, device=dev, dtype=torch.float64)",
           visible=True, case="colour_contrast"),
    Mutant(cell="colour_distort", name="no clamp to [0, 1]",
           find=_CD_RET, replace="return out.view_as(images)",
           visible=True, case="colour_dtype_and_range, augment_uint8"),
    Mutant(cell="colour_distort", name="seeds its own generator (a fixed seed), ignores the given one",
           find=_CD_N, replace=_CD_N.rstrip("\n") + _OWN_GENERATOR + "\n",
           visible=True, case="colour_generator"),
    Mutant(cell="colour_distort", name="draws from torch's global random state (no generator=)",
           find=_DRAW, replace=_DRAW_GLOBAL,
           visible=True, case="colour_global_state"),
    Mutant(cell="colour_distort", name="brightness factor drawn with the saturation strength (copy and paste)",
           find="b = torch.where(jittered, uniform(1 - brightness, 1 + brightness), 1.0)",
           replace="b = torch.where(jittered, uniform(1 - saturation, 1 + saturation), 1.0)",
           visible=True, case="colour_brightness"),
    Mutant(cell="colour_distort", name="saturation factor drawn with the contrast strength (copy and paste)",
           find="s = torch.where(jittered, uniform(1 - saturation, 1 + saturation), 1.0)",
           replace="s = torch.where(jittered, uniform(1 - contrast, 1 + contrast), 1.0)",
           visible=True, case="colour_saturation"),
    Mutant(cell="colour_distort", name="hue rotation in RGB about the red axis (no YIQ change of basis)",
           find="hue_matrix = torch.linalg.inv(to_yiq) @ rot @ to_yiq", replace="hue_matrix = rot",
           visible=True, case="colour_hue"),
    Mutant(cell="colour_distort", name="hue shift applied to every image (jitter_p ignored for the hue)",
           find="h = torch.where(jittered, uniform(-hue, hue), 0.0).double().view(n)",
           replace="h = uniform(-hue, hue).double().view(n)", visible=True, case="colour_identity"),
    # ------------------------------------------------------------------ nt_xent_loss_loop
    Mutant(cell="nt_xent_loss_loop", name="self-similarity kept in the denominator",
           find=_NL_OTHERS, replace="others = sims",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="positive left out of the denominator (negatives only)",
           find=_NL_OTHERS, replace="others = torch.cat([sims[k:k + 1] for k in range(2 * n) if k not in (i, (i + n) % (2 * n))])",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="partner at i + 1 instead of i + N",
           find=_NL_TOTAL, replace="total = total + torch.logsumexp(others, dim=0) - sims[(i + 1) % (2 * n)]",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="dot product instead of cosine similarity",
           find=_NL_SIMS, replace="sims = (z @ z[i]) / temperature",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="no temperature",
           find=_NL_SIMS, replace="sims = F.cosine_similarity(z[i].unsqueeze(0), z, dim=1)",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="sum over 2N anchors divided by N",
           find=_NL_RET, replace="return total / n",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="only the N anchors of z1",
           find="for i in range(2 * n):", replace="for i in range(n):",
           visible=True, case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss_loop", name="the loss computed in float64 and returned as float64",
           find=_NL_RET, replace="return (total / (2 * n)).double()",
           visible=True, case="nt_xent_loop_float32"),
    Mutant(cell="nt_xent_loss_loop", name="Python floats (no gradient)",
           find=_NL_RET, replace="return torch.tensor(float(total / (2 * n)), dtype=z1.dtype)",
           visible=True, case="nt_xent_loop_gradient"),
    # ------------------------------------------------------------------ nt_xent_loss
    Mutant(cell="nt_xent_loss", name="no self-mask (a view is its own negative)",
           find=_NT_MASK, replace="logits = z @ z.T / temperature",
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="positive at i + 1 instead of i + N",
           find=_NT_PARTNER, replace="partner = ((torch.arange(2 * n) + 1) % (2 * n)).to(z.device)",
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="no normalisation (dot product, not cosine)",
           find=_NT_NORM, replace="z = torch.cat([z1, z2])",
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="no temperature",
           find=_NT_MASK, replace=_NT_MASK.replace(" / temperature", ""),
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="sum over 2N divided by N",
           find=_NT_RET, replace='return F.cross_entropy(logits, partner, reduction="sum") / n',
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="only the N views of z1 as anchors",
           find=_NT_RET, replace="return F.cross_entropy(logits[:n], partner[:n])",
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="self-similarity masked with 0 instead of -inf",
           find=_NT_MASK, replace=_NT_MASK.replace('float("-inf")', "0.0"),
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="normalised over the batch axis",
           find=_NT_NORM, replace="z = F.normalize(torch.cat([z1, z2]), dim=0)",
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="returns float32 whatever the input dtype",
           find=_NT_RET, replace="return F.cross_entropy(logits.float(), partner)",
           visible=True, case="nt_xent_float64"),
    Mutant(cell="nt_xent_loss", name="the loss detached from the graph (no gradient)",
           find=_NT_RET, replace="return F.cross_entropy(logits, partner).detach()",
           visible=True, case="nt_xent_gradient"),
    Mutant(cell="nt_xent_loss", name="returns float64 whatever the input dtype",
           find=_NT_RET, replace="return F.cross_entropy(logits.double(), partner)", visible=True,
           case="nt_xent_float32"),
    # ------------------------------------------------------------------ ProjectionHead
    Mutant(cell="projection_head", name="no nonlinearity",
           find=_PH_RELU, replace="",
           visible=True, case="head_values"),
    Mutant(cell="projection_head", name="output dimension in_dim instead of out_dim",
           find=_PH_OUT, replace="            nn.Linear(hidden_dim, in_dim),\n",
           visible=True, case="head_values"),
    Mutant(cell="projection_head", name="no BatchNorm",
           find=_PH_BN, replace="",
           visible=True, case="head_values"),
    Mutant(cell="projection_head", name="ReLU after the last layer too",
           find=_PH_OUT, replace="            nn.Linear(hidden_dim, out_dim),\n            nn.ReLU(),\n",
           visible=True, case="head_values"),
    Mutant(cell="projection_head", name="ReLU before BatchNorm",
           find=_PH_BN_RELU, replace="            nn.ReLU(inplace=True),\n            nn.BatchNorm1d(hidden_dim),\n",
           visible=True, case="head_values"),
    Mutant(cell="projection_head", name="forward L2-normalises the output",
           find=_PH_FWD, replace="return F.normalize(self.net(h), dim=1)",
           visible=True, case="head_values"),
    Mutant(cell="projection_head", name="forward under torch.no_grad() (no gradients)",
           find=_PH_FWD, replace="with torch.no_grad():\n            return self.net(h)",
           visible=True, case="head_gradients"),
    Mutant(cell="projection_head", name="hidden size hard-coded to 1024 (hidden_dim ignored)",
           find="nn.Linear(in_dim, hidden_dim, bias=False)", replace="nn.Linear(in_dim, 1024, bias=False)",
           visible=True, case="head_values"),
    # ------------------------------------------------------------------ simclr_train_step
    Mutant(cell="simclr_train_step", name="no zero_grad (gradients accumulate)",
           find=_ST_ZERO, replace="",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="no optimizer.step()",
           find=_ST_STEP, replace="",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="returns the loss with its graph",
           find=_ST_RET, replace="return loss",
           visible=True, case="train_step_returns_detached"),
    Mutant(cell="simclr_train_step", name="two separate forward passes (BatchNorm statistics per view)",
           find=_ST_FWD, replace="z = torch.cat([head(encoder(half)) for half in views.chunk(2)])",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="the same view twice (augment called once)",
           find=_ST_VIEWS, replace="view = augment(images, generator)\n    views = torch.cat([view, view])",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="temperature not passed on",
           find=_ST_LOSS, replace="loss = nt_xent_loss(z1, z2)",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="step before backward",
           find=_ST_ORDER, replace="    optimizer.zero_grad(set_to_none=True)\n    optimizer.step()\n    loss.backward()\n",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="second view detached (no gradient through it)",
           find=_ST_SPLIT, replace="z1, z2 = z.float().chunk(2)\n    z2 = z2.detach()",
           visible=True, case="train_step_two_steps"),
    Mutant(cell="simclr_train_step", name="views from generators of its own (fixed seeds), ignores the given one",
           find=_ST_VIEWS, replace="views = torch.cat([augment(images, torch.Generator().manual_seed(0)), "
                                   "augment(images, torch.Generator().manual_seed(1))])",
           visible=True, case="train_step_generator"),
    Mutant(cell="simclr_train_step", name="generator not passed on: augment draws from the global random state",
           find=_ST_VIEWS, replace="views = torch.cat([augment(images), augment(images)])",
           visible=True, case="train_step_global_state"),
    Mutant(cell="simclr_train_step", name="no augmentation by default (augment=None gives the plain images)",
           find="augment = simclr_augment if augment is None else augment",
           replace="augment = (lambda x, g=None: vision.to_float_images(x)) if augment is None else augment",
           visible=True, case="train_step_default_augment"),
    Mutant(cell="simclr_train_step", name="autocast_dtype ignored (no autocast)",
           find="with vision.autocast_context(views.device, autocast_dtype):",
           replace="with vision.autocast_context(views.device, None):",
           visible=True, case="train_step_bf16"),
    Mutant(cell="simclr_train_step", name="the loss computed in the autocast dtype (bf16 similarities)",
           find=_ST_SPLIT, replace="z1, z2 = z.chunk(2)",
           visible=True, case="train_step_bf16"),
    # ------------------------------------------------------------------ linear_probe_accuracy
    Mutant(cell="linear_probe_accuracy", name="no standardisation",
           find=_LP_STATS, replace="mean, std = 0.0, 1.0",
           visible=True, case="probe_standardises"),
    Mutant(cell="linear_probe_accuracy", name="returns a tensor instead of a float",
           find=_LP_RET, replace="return (logits.argmax(1) == test_labels.to(logits.device)).float().mean()",
           visible=True, case="probe_accuracy"),
    Mutant(cell="linear_probe_accuracy", name="standardises the caller's features in place",
           find=_LP_X, replace="x_train, x_test = train_feats.float().sub_(mean).div_(std), (test_feats.float() - mean) / std",
           visible=True, case="probe_inputs_unchanged"),
    Mutant(cell="linear_probe_accuracy", name="scores the training predictions",
           find=_LP_RET, replace="return float((probe(x_train).argmax(1)[:len(x_test)] == test_labels.to(logits.device))"
                                 ".float().mean())",
           visible=True, case="probe_accuracy"),
    Mutant(cell="linear_probe_accuracy", name="returns the error rate instead of the accuracy",
           find=_LP_RET, replace="return float((logits.argmax(1) != test_labels.to(logits.device)).float().mean())",
           visible=True, case="probe_accuracy"),
    # ------------------------------------------------------------------ knn_accuracy
    Mutant(cell="knn_accuracy", name="dot product without normalising",
           find=_KN_NORM, replace="bank = train_feats.float()\n    queries = test_feats.float().to(bank.device)",
           visible=True, case="knn_values"),
    Mutant(cell="knn_accuracy", name="Euclidean distance instead of cosine",
           find=_KN_TOPK, replace="neighbours = (-torch.cdist(test_feats.float()[start:start + batch_size].to(bank.device), "
                                  "train_feats.float().to(bank.device))).topk(k, dim=1).indices",
           visible=True, case="knn_values"),
    Mutant(cell="knn_accuracy", name="drops the nearest neighbour as if it were the query itself",
           find=_KN_TOPK, replace=_KN_TOPK.replace("topk(k, dim=1).indices", "topk(k + 1, dim=1).indices[:, 1:]"),
           visible=True, case="knn_values"),
    Mutant(cell="knn_accuracy", name="k ignored (always 20)",
           find=_KN_TOPK, replace=_KN_TOPK.replace("topk(k,", "topk(min(20, len(bank)),"),
           visible=True, case="knn_values"),
    Mutant(cell="knn_accuracy", name="the nearest neighbour's label instead of the majority",
           find=_KN_PRED, replace="predicted.append(train_labels.to(bank.device)[neighbours[:, 0]].cpu())",
           visible=True, case="knn_values"),
    Mutant(cell="knn_accuracy", name="the k least similar points",
           find=_KN_TOPK, replace=_KN_TOPK.replace("topk(k, dim=1)", "topk(k, dim=1, largest=False)"),
           visible=True, case="knn_values"),
    Mutant(cell="knn_accuracy", name="keeps the last chunk's predictions only (= instead of append)",
           find=_KN_PRED, replace="predicted = [votes.argmax(dim=1).cpu()]", visible=True, case="knn_chunked"),
    Mutant(cell="nt_xent_loss_loop", name="returns float32 whatever the input dtype",
           find=_NL_RET, replace="return (total / (2 * n)).float()", case="nt_xent_loop_float64"),
    Mutant(cell="nt_xent_loss", name="returns float32 whatever the input dtype",
           find=_NT_RET, replace="return F.cross_entropy(logits, partner).float()", case="nt_xent_float64"),
]
