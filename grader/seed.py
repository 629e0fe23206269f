"""The judge seed, the one secret of a batch: drawn, kept, shared with shards and hidden from every page.

The seed is drawn once per grading folder and kept in ``grading/judge-seed.txt``, so every student of a
batch (and a later regrade) sees the same hidden inputs, and nobody can know them in advance from the
repository. Every case seed of the judge derives from it (grader/judge.py ``case_runs``). It leaves this
module in three forms only: as a number to the judge, as a digest in the fingerprints of the status files
(:func:`seed_digest`, from which it cannot be read back), and as the list of strings that no page or
executed notebook may show (:func:`secret_strings`, replaced by ``<hidden>``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import tempfile
from pathlib import Path

from .course import Course, printable
from .judge import case_runs

SEED_FILE = "judge-seed.txt"


def seed_file(grading: Path) -> Path:
    return Path(grading) / SEED_FILE


def read_seed(grading: Path) -> int | None:
    """The grading folder's seed, or None when it has none (or an unreadable one)."""
    try:
        return int(seed_file(grading).read_text().strip())
    except (OSError, ValueError):
        return None


def _link_new(path: Path, text: str) -> None:
    """Create ``path`` holding ``text`` atomically, unless it exists (then the first writer wins)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def adopt_seed(grading: Path, seed: int) -> int:
    """The grading folder's judge seed; ``seed`` written there first if it has none (N shards that start
    at once on N nodes all end up with the one seed the first of them wrote)."""
    path = seed_file(grading)
    if not path.exists():
        _link_new(path, f"{int(seed)}\n")
    found = read_seed(grading)
    if found is None:   # an unreadable file: a new seed, written over it
        found = secrets.randbelow(2 ** 62)
        path.write_text(f"{found}\n")
    return found


def ensure_seed(grading: Path) -> int:
    """The grading folder's judge seed, drawn (wide: nobody tries every seed against a case seed) and
    created atomically if absent."""
    return adopt_seed(grading, secrets.randbelow(2 ** 62))


def give_seed(folder: Path, seed: int, origin: Path) -> None:
    """A shard's ``folder`` gets the class's ``seed`` (read from grading folder ``origin``); a folder
    graded with another seed is refused (ValueError)."""
    path = seed_file(folder)
    if path.exists() and path.read_text().strip() != str(seed):
        raise ValueError(f"{folder} was graded with judge seed {path.read_text().strip()}, the class's is {seed} "
                         f"({seed_file(origin)}): remove the shard folder and grade it again")
    if not path.exists():
        tmp = path.with_name(f".{SEED_FILE}.tmp")
        tmp.write_text(f"{seed}\n")
        tmp.replace(path)


def seed_digest(seed: int) -> str:
    """The judge seed as the fingerprints hold it: a digest, from which the seed cannot be read back."""
    return hashlib.sha256(f"las-judge-seed:{int(seed)}".encode()).hexdigest()


def secret_strings(seed, stems) -> tuple[str, ...]:
    """The batch's judge seed and every case seed derived from it for ``stems``, as text (the ones of at
    least four characters, longest first): what no page or executed notebook may show."""
    values = {int(seed)}
    for stem in stems:
        try:
            values |= {int(v) for v in case_runs([int(seed)], stem)[0]["case_seeds"].values()}
        except Exception:  # noqa: BLE001 - a notebook without probes has no case seeds
            pass
    found = {str(v) for v in values}
    # the same numbers in hex (a stack walk's frame locals printed with hex(), '%x', f'{v:X}'), where long
    # enough not to match ordinary text
    found |= {form for v in values for form in (f"{v:x}", f"{v:X}") if len(form) >= 6}
    return tuple(sorted((s for s in found if len(s) >= 4), key=len, reverse=True))


def course_secrets(course: Course) -> tuple[str, ...]:
    """:func:`secret_strings` of the grading folder's judge seed (none when it has no seed file)."""
    seed = read_seed(course.grading)
    return () if seed is None else secret_strings(seed, course.notebook_names())


def hide_secrets(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, "<hidden>")
    return text


def scrub_value(value, secrets: tuple[str, ...]):
    """Every string in an output or a notebook (not base64 image data) printable as UTF-8 (a lone
    surrogate would make the file unwritable) and without the batch's seeds."""
    if isinstance(value, str):
        return hide_secrets(printable(value), secrets)
    if isinstance(value, list):
        return [scrub_value(v, secrets) for v in value]
    if isinstance(value, dict):
        return {printable(k): (v if isinstance(k, str) and k.startswith("image/") and k != "image/svg+xml"
                               and isinstance(v, (str, list)) else scrub_value(v, secrets))
                for k, v in value.items()}
    return value
