"""The GPT-NeoX-20B tokenizer that every Pythia model uses, shipped in data/tokenizer/gpt-neox-20b.

Its own module because both sides need it: the model loaders (utils/lm.py, which re-exports
:func:`load_tokenizer`) and the miniature suite's build (utils/suite_build.py, utils/suite_training.py),
which utils/lm.py itself calls; with the tokenizer in lm.py the two imported each other.
"""

from __future__ import annotations

from .paths import DATA_DIR

TOKENIZER_DIR = DATA_DIR / "tokenizer" / "gpt-neox-20b"


def load_tokenizer(*, with_mask_token: bool = False):
    """The GPT-NeoX-20B tokenizer that every Pythia model uses, from data/tokenizer/gpt-neox-20b.

    eos = bos = unk = ``"<|endoftext|>"`` (id 0), as in Pythia's tokenizer_config; NO pad token and
    no BOS added when encoding. ``with_mask_token=True`` registers ``"<|mask|>"`` as the mask token
    (id 50277, the first free row of the 50,304-row padded embedding) for mini-bert.
    """
    from transformers import PreTrainedTokenizerFast

    path = TOKENIZER_DIR / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the pack's data/ folder is incomplete (re-clone?)")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(path),
        eos_token="<|endoftext|>",
        bos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    if with_mask_token:
        from .suite_recipes import MASK_TOKEN

        tokenizer.add_special_tokens({"mask_token": MASK_TOKEN})
    return tokenizer
