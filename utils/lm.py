"""One loading path for real Pythia models (Hugging Face hub) and the pack's miniature suite.

    model, tokenizer = load_causal_lm("EleutherAI/pythia-70m", step=1000)   # hub, revision "step1000"
    model, tokenizer = load_causal_lm("mini-pythia-6.5m", step=256)          # local miniature suite

Which of the two a notebook uses is its parameters cell's ``MODEL_SUITE``, one of
:data:`MODEL_SUITES` (``"auto"``, ``"hub"``, ``"mini"``), turned into ``"hub"`` or ``"mini"`` by
:func:`resolve_model_suite` (Task 2 and Task B both call it).

Both return a ``GPTNeoXForCausalLM`` in eval mode (fp32 by default) and the same GPT-NeoX-20B
tokenizer, so losses are nats per token over the same vocabulary. A hub name never turns silently
into a miniature model: without a connection the loader raises :class:`HubUnavailableError`,
whose message says how to choose the miniature suite instead.

Pythia's traps, handled here or documented for the caller:
  * fp16 gives inf/NaN logits: load fp32 (default), or bf16 weights and take log-softmax in fp32;
  * the tokenizer has NO pad token: batch with ``tokenizer.eos_token_id`` as padding and mask the
    padded positions out of the labels (-100) and the attention mask;
  * no BOS token is added by default (``tokenizer("text")`` returns only the text's ids).

Build the suite from a shell with ``python -m utils.lm build [default|small|micro] [--force]``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path

import torch

from .tokenizer import TOKENIZER_DIR, load_tokenizer  # noqa: F401 - the notebooks import it from here
HUB_HOST = "huggingface.co"

#: Pythia's sizes on the hub (Task B's real suite) and its 154 checkpoint steps.
PYTHIA_MODELS = tuple(f"EleutherAI/pythia-{s}" for s in ("14m", "31m", "70m", "160m", "410m", "1b", "1.4b",
                                                          "2.8b", "6.9b", "12b"))
PYTHIA_STEPS = (0,) + tuple(2**k for k in range(10)) + tuple(range(1000, 143001, 1000))

_LOCAL_CAUSAL = re.compile(r"^mini-pythia-[0-9.]+m$")

#: The words a notebook's ``MODEL_SUITE`` may take: ``"auto"`` (hub models when huggingface.co is
#: reachable, else the miniature suite), ``"hub"`` (real Hugging Face models), ``"mini"`` (the
#: pack's miniature suite).
MODEL_SUITES = ("auto", "hub", "mini")


class HubUnavailableError(RuntimeError):
    """A hub model was requested but huggingface.co cannot be reached (and it is not cached)."""


# ------------------------------------------------------------------------------------------ hub
def _hub_offline_by_env() -> bool:
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_available(timeout: float = 2.0) -> bool:
    """True when huggingface.co (or ``$HF_ENDPOINT``) accepts a TCP connection within ``timeout``
    seconds; False when ``HF_HUB_OFFLINE`` is set. Never waits longer than ``timeout``, DNS included."""
    if _hub_offline_by_env():
        return False
    import socket
    from urllib.parse import urlparse

    endpoint = urlparse(os.environ.get("HF_ENDPOINT", f"https://{HUB_HOST}"))
    host, port = endpoint.hostname or HUB_HOST, endpoint.port or (443 if endpoint.scheme != "http" else 80)
    result = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            result.append(True)
        except OSError:
            result.append(False)

    # getaddrinfo ignores socket timeouts; a daemon thread bounds the whole check.
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(result and result[0])


def _offline_message(name: str, kind: str) -> str:
    if kind == "causal":
        fix = ("To run offline, use the miniature suite: load_causal_lm('mini-pythia-<size>') "
               "(names: utils.lm.model_names('mini')), or set MODEL_SUITE = 'mini' in the notebook's "
               "parameters cell. Build it with `python -m utils.lm build`.")
    else:
        fix = ("To run offline, use the miniature masked model: load_masked_lm('mini-bert'), "
               "or set MODEL_SUITE = 'mini' in the notebook's parameters cell.")
    why = "HF_HUB_OFFLINE is set" if _hub_offline_by_env() else f"no connection to {HUB_HOST}"
    return f"{name} could not be downloaded ({why}) and is not in the local Hugging Face cache. {fix}"


def _from_hub(cls, name: str, revision: str | None, kind: str, **kwargs):
    """``cls.from_pretrained`` from the hub, or from the local HF cache when offline; raises
    :class:`HubUnavailableError` when neither works. Without a network, :func:`hub_available` gives up after
    its 2 s timeout."""
    online = hub_available()
    try:
        return cls.from_pretrained(name, revision=revision, local_files_only=not online, **kwargs)
    except OSError as exc:  # transformers wraps connection and missing-cache errors in OSError
        if online and "connect" not in str(exc).lower():
            raise
        raise HubUnavailableError(_offline_message(name, kind)) from exc
    except Exception as exc:  # requests/httpx connection errors that escape the wrapper
        if "connect" in type(exc).__name__.lower() or "timeout" in type(exc).__name__.lower():
            raise HubUnavailableError(_offline_message(name, kind)) from exc
        raise


def resolve_model_suite(requested: str = "auto", preset: str | None = None, *, verbose: bool = True) -> str:
    """Turn the parameters cell's ``MODEL_SUITE`` into ``"hub"`` or ``"mini"`` and say why (one line).

    requested: one of :data:`MODEL_SUITES` (case and surrounding blanks ignored; None means "auto").
    preset: the resolved preset (:func:`utils.presets.resolve_preset`); ``"auto"`` never picks the
        hub in the ``smoke`` preset, which must run in seconds without downloads.

    * under nbgrader (``NBGRADER_EXECUTION`` set) always ``"mini"``: autograding has no network and
      must be identical for every student, whatever they chose;
    * ``"hub"``: the real models, without probing the network: a model that is neither reachable nor
      in the local Hugging Face cache raises :class:`HubUnavailableError` when it is loaded, with a
      message that says how to switch;
    * ``"mini"``: the miniature suite;
    * ``"auto"``: ``"mini"`` in the smoke preset, else ``"hub"`` when huggingface.co is reachable
      (:func:`hub_available`, at most 2 s), else ``"mini"``.

    Raises ValueError for any other word, listing the valid ones.
    """
    from .presets import autograding

    word = "auto" if requested is None else str(requested).strip().lower()
    if word not in MODEL_SUITES:
        hint = " ('pythia' is now called 'hub')" if word == "pythia" else ""
        raise ValueError(f"MODEL_SUITE must be one of {', '.join(repr(w) for w in MODEL_SUITES)}, "
                         f"got {requested!r}{hint}")
    if autograding():
        choice = "mini"
        why = ("NBGRADER_EXECUTION is set (autograding): always the miniature suite"
               + (f", MODEL_SUITE={word!r} is overridden" if word != "mini" else ""))
    elif word != "auto":
        choice, why = word, "set in the parameters cell"
    elif preset == "smoke":
        choice, why = "mini", "auto: the smoke preset never downloads"
    elif hub_available():
        choice, why = "hub", f"auto: {HUB_HOST} is reachable"
    else:
        choice = "mini"
        why = "auto: " + ("HF_HUB_OFFLINE is set" if _hub_offline_by_env() else f"{HUB_HOST} is not reachable")
    if verbose:
        label = "real Hugging Face models" if choice == "hub" else "the pack's miniature suite"
        print(f"Model suite: {choice}, {label} ({why})")
    return choice


# ------------------------------------------------------------------------------ miniature suite
def build_suite(suite: str = "default", *, force: bool = False, progress: bool = True) -> Path:
    """Train the miniature suite (or find it cached, keyed on a hash of its recipe, the corpus and
    the tokenizer) under ``build/cache/model_zoo/<suite>/`` and return that folder.

    ``"micro"``: 3 sizes, tests and the smoke preset; ``"default"``: 6 sizes and mini-bert, 3 GB of
    checkpoints. A build prints how long it took (``python -m utils.suite_build build NAME``); the
    course repository's benchmark ``model_zoo.py --force`` times a cold build of the default suite.
    Only missing or changed models are retrained.
    """
    from .suite_build import build

    return build(suite, force=force, progress=progress)


_CHECKED: set = set()  # suites whose cache this process has already validated


def suite_manifest(suite: str = "default", *, build: bool = True) -> dict:
    """The suite's manifest: ``models`` (name, d_model, n_layers, total_params,
    non_embedding_params, training record with held-out losses), ``steps``, ``tokens_per_step``,
    ``context``, ``data`` (corpus and held-out description) and ``bert``. Builds the suite when
    it is missing (``build=False`` raises FileNotFoundError instead)."""
    from .suite_build import suite_dir

    path = suite_dir(suite) / "manifest.json"
    if build and (suite, path) not in _CHECKED:
        build_suite(suite, progress=True)
        _CHECKED.add((suite, path))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: build the suite with `python -m utils.lm build {suite}`")
    return json.loads(path.read_text())


def model_names(model_suite: str = "mini", *, suite: str = "default") -> list[str]:
    """Causal model names, smallest first: ``"hub"`` -> the hub's EleutherAI/pythia-*, ``"mini"``
    -> the miniature suite's mini-pythia-* (``suite`` picks default or micro). ``model_suite`` is
    what :func:`resolve_model_suite` returns."""
    if model_suite == "hub":
        return list(PYTHIA_MODELS)
    if model_suite == "mini":
        return [m["name"] for m in suite_manifest(suite)["models"]]
    raise ValueError(f"model_suite must be 'hub' or 'mini' (see resolve_model_suite), got {model_suite!r}")


def checkpoint_steps(name: str, *, suite: str = "default") -> list[int]:
    """The steps at which ``name`` has a checkpoint (Pythia: 154 steps from 0 to 143,000)."""
    if _LOCAL_CAUSAL.match(name):
        return list(suite_manifest(suite)["steps"])
    return list(PYTHIA_STEPS)


def _local_folder(name: str, step: int | None, suite: str) -> Path:
    manifest = suite_manifest(suite)
    names = [m["name"] for m in manifest["models"]]
    if name not in names:
        raise ValueError(f"the {suite!r} miniature suite has no model {name!r}; it has {names}")
    steps = manifest["steps"]
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ValueError(f"{name} has no checkpoint at step {step}; it has steps {steps}")
    from .suite_build import suite_dir

    return suite_dir(suite) / name / f"step{step}"


def load_causal_lm(name: str, step: int | None = None, *, suite: str = "default", dtype=torch.float32,
                   device_map: str | dict | None = None):
    """Load a causal LM and its tokenizer; returns ``(model, tokenizer)``, model in eval mode.

    name: ``"EleutherAI/pythia-70m"`` (or any hub causal LM; revision ``f"step{step}"``, or main
    when step is None) or ``"mini-pythia-<size>"`` from the local ``suite`` (step None = final).
    dtype: torch.float32 (default). torch.bfloat16 halves memory; then take log-softmax in fp32.
    Never use float16 with Pythia (inf/NaN logits).
    device_map: for hub models too large for one device (pythia-6.9b and -12b need 28 and 48 GB in
    fp32): ``"auto"`` lets accelerate spread the layers over every visible GPU (then CPU memory),
    e.g. ``load_causal_lm("EleutherAI/pythia-12b", 143000, dtype=torch.bfloat16, device_map="auto")``;
    inputs then go to ``model.get_input_embeddings().weight.device``. None (default): one device.

    Raises HubUnavailableError (hub name, no connection, not cached) and ValueError (unknown
    local name or step).
    """
    if dtype == torch.float16:
        raise ValueError("float16 gives inf/NaN logits with Pythia; use torch.float32 or torch.bfloat16")
    if name.startswith("mini-"):
        from transformers import GPTNeoXForCausalLM

        if not _LOCAL_CAUSAL.match(name):
            raise ValueError(f"unknown miniature model {name!r}; names look like 'mini-pythia-6.5m' "
                             f"(see utils.lm.model_names('mini'))")
        from .suite_training import quiet_transformers

        with quiet_transformers():
            model = GPTNeoXForCausalLM.from_pretrained(_local_folder(name, step, suite), dtype=dtype)
        tokenizer = load_tokenizer()
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        revision = f"step{step}" if step is not None else None
        extra = {"device_map": device_map} if device_map is not None else {}
        model = _from_hub(AutoModelForCausalLM, name, revision, "causal", dtype=dtype, **extra)
        tokenizer = _from_hub(AutoTokenizer, name, revision, "causal")
    return model.eval(), tokenizer


def load_masked_lm(name: str = "mini-bert", *, suite: str = "default"):
    """Load a masked LM and its tokenizer; returns ``(model, tokenizer)``, model in eval mode, fp32.

    ``"mini-bert"``: the suite's BertForMaskedLM with the GPT-NeoX tokenizer plus the mask token
    ``"<|mask|>"`` (``tokenizer.mask_token_id == 50277``). It was trained on plain token windows
    without [CLS]/[SEP]: score a text as ``tokenizer(text)["input_ids"]``, nothing added.
    Any other name is loaded from the hub (e.g. ``"bert-base-uncased"``), raising
    HubUnavailableError offline.
    """
    from transformers import AutoModelForMaskedLM, AutoTokenizer, BertForMaskedLM

    if name == "mini-bert":
        from .suite_build import suite_dir

        suite_manifest(suite)  # builds the suite when missing
        folder = suite_dir(suite) / "mini-bert"
        from .suite_training import quiet_transformers

        with quiet_transformers():
            model = BertForMaskedLM.from_pretrained(folder, dtype=torch.float32)
        tokenizer = load_tokenizer(with_mask_token=True)
    else:
        model = _from_hub(AutoModelForMaskedLM, name, None, "masked", dtype=torch.float32)
        tokenizer = _from_hub(AutoTokenizer, name, None, "masked")
    return model.eval(), tokenizer


def main(argv: list[str] | None = None) -> int:
    """``python -m utils.lm build [default|small|micro] [--force]``: the same command as
    ``python -m utils.suite_build build ...`` (build a suite and print its manifest summary)."""
    from .suite_build import main as build_main

    return build_main(argv)


if __name__ == "__main__":
    sys.exit(main())
