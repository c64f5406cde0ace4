"""`draftset show DIR --row N | --id ID`: one training row in the terminal, mask highlighted.

Dataset text is shown through `rich.text.Text` (never parsed as markup), so a row holding
`[bold]` or `<script>` prints as itself, and control characters from the data (ESC/OSC
sequences, BEL, C1 controls, bidi overrides) are never written to the terminal: they are shown
escaped (`\\x1b`, `\\u202e`). Without colours (piped, `NO_COLOR`) supervised runs are wrapped in
`⟦…⟧` so a mask stays readable in a log. Decoding needs the tokenizer: the manifest's path, or
`--tokenizer`; only the fast Rust tokenizer file is loaded.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from draftset.config.fields import option_name
from draftset.config.schema import ShowArgs
from draftset.console import StdoutConsole
from draftset.core import defaults
from draftset.core.digests import vocabulary_sample_sha256
from draftset.core.errors import UsageError
from draftset.core.hub import cached_model_folder, hub_offline
from draftset.core.naming import on_command_line
from draftset.core.terminal import visible, visible_parts
from draftset.core.words import plural
from draftset.output.readback import (
    OutputSet,
    iter_jsonl,
    open_output,
    supervised_runs,
)

SUPERVISED_STYLE = "bold black on green3"
TOKEN_STYLES = ("", "on grey23")  # alternate backgrounds mark token boundaries
SUPERVISED_TOKEN_STYLES = ("bold black on green3", "bold black on dark_sea_green2")
ESCAPE_STYLE = "bold red"  # an escaped control character (added to the segment's style)
MARK_OPEN, MARK_CLOSE = "\u27e6", "\u27e7"  # ⟦ ⟧ around supervised runs without colours
TOKEN_SEP = "\u00a6"  # ¦ between tokens of --tokens without colours

Decoder = Callable[[list[int]], str]


def _append(text: Text, chunk: str, style: str, plain: bool) -> None:
    """Append data to ``text`` with its controls escaped (and, plain, the markers too)."""
    for part, escaped in visible_parts(chunk, MARK_OPEN + MARK_CLOSE + TOKEN_SEP if plain else ""):
        text.append(part, style=f"{style} {ESCAPE_STYLE}".strip() if escaped else style)


class ShowError(UsageError):
    """Unusable arguments (exit code 2)."""


def not_the_sets_tokenizer(out: OutputSet, backend: Any) -> str | None:
    """Why the loaded ``backend`` (a `tokenizers.Tokenizer`) is not the one the set's manifest
    records, ending in what to do; None when it may be. Decoding with another is garbage."""
    recorded = out.manifest.get("tokenizer") or {}
    built_with = recorded.get("tokenizer_size")
    size = backend.get_vocab_size(with_added_tokens=True)
    # transformers may count a few tokens more than the file (Qwen3.5: 248,077 to 248,070):
    # only a size off by more than 1% is surely another tokenizer, whose decoding is garbage
    if isinstance(built_with, int) and abs(size - built_with) > built_with // 100:
        return (
            f"it has {size:,} tokens, the set's had {built_with:,} (give that one with"
            f" {option_name(ShowArgs, 'tokenizer')})"
        )
    # one of the same size can still spell its ids otherwise (older sets lack the digest)
    sample = recorded.get("vocabulary_sample_sha256")
    if isinstance(sample, str) and vocabulary_sample_sha256(backend) != sample:
        return (
            "its vocabulary differs from the one the manifest records (give that one with"
            f" {option_name(ShowArgs, 'tokenizer')})"
        )
    return None


def tokenizer_folder_problem(out: OutputSet, folder: str | Path) -> str | None:
    """`not_the_sets_tokenizer` for a tokenizer folder holding a ``tokenizer.json`` (None for
    anything else: a hub id, a folder of vocab.json + merges.txt, one that does not load)."""
    # lazy: tokenizers only when a tokenizer is given
    from tokenizers import Tokenizer

    path = Path(folder).expanduser() / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception:  # the job's own load says why
        return None
    return not_the_sets_tokenizer(out, backend)


def _tokenizer_folder() -> str:
    """``--tokenizer FOLDER`` on the command line, the API's ``tokenizer=FOLDER``."""
    return "--tokenizer FOLDER" if on_command_line() else "tokenizer=FOLDER"


def _hub_tokenizer_file(tok: str) -> Path | None:
    """The ``tokenizer.json`` of hub repo ``tok`` (a set built from a hub id records the id, as
    `verify` reads it), read through huggingface_hub's cache; None for a name that is no hub id
    or a repo without the file. Offline (``HF_HUB_OFFLINE``) a `ShowError` saying so."""
    if not tok or Path(tok).expanduser().exists() or tok.count("/") > 1 or tok.startswith("."):
        return None  # a local path (a folder without tokenizer.json, missing): no hub id
    if (var := hub_offline()) and (cached := cached_model_folder(tok)) is not None:
        file = cached / "tokenizer.json"  # offline, the hub cache holds it
        return file if file.is_file() else None
    if var:
        raise ShowError(
            f"cannot decode: the set's tokenizer is the hub id {tok!r}, and {var} is set (pass"
            f" {_tokenizer_folder()}, or unset it to read the hub)"
        )
    try:
        # lazy: only hub ids need it
        import huggingface_hub

        return Path(huggingface_hub.hf_hub_download(tok, "tokenizer.json"))
    except Exception as exc:
        raise ShowError(
            f"cannot decode: cannot read tokenizer.json of the hub id {tok!r}"
            f" ({type(exc).__name__}; pass {_tokenizer_folder()})"
        ) from None


def load_decoder(out: OutputSet, tokenizer: str | None = None) -> tuple[Decoder, set[int]]:
    """Decode function (special tokens kept) and the end-of-turn token ids of the manifest."""
    # lazy: tokenizers only when a row is decoded
    from tokenizers import Tokenizer

    tok = tokenizer or str((out.manifest.get("tokenizer") or {}).get("path") or "")
    path = Path(tok) / "tokenizer.json"
    if not path.is_file():
        path = _hub_tokenizer_file(tok) or path
    if not path.is_file():
        raise ShowError(f"cannot decode: no tokenizer.json in {tok!r} (pass {_tokenizer_folder()})")
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ShowError(f"cannot load tokenizer {path}: {exc}") from None
    if why := not_the_sets_tokenizer(out, backend):
        raise ShowError(f"{tok} is not the tokenizer this set was built with: {why}")
    eot = {
        i
        for t in (out.manifest.get("template") or {}).get("eot_tokens") or []
        if (i := backend.token_to_id(t)) is not None
    }
    return (lambda ids: backend.decode(ids, skip_special_tokens=False)), eot


def find_row(out: OutputSet, row: int | None, row_id: str | None) -> int:
    if not out.readable:
        raise ShowError(out.read_error or "no Arrow data")
    n = out.num_rows
    if row_id is not None:
        try:
            return out.ids().index(row_id)
        except ValueError:
            raise ShowError(_not_in_set(out, row_id)) from None
    assert row is not None
    flag = option_name(ShowArgs, "row")  # `--row`, the API's `row`: as the caller gave it
    if n == 0:
        raise ShowError(f"{flag} {row}: the set has no rows{_where_rows_went(out)}")
    if not -n <= row < n:
        raise ShowError(
            f"{flag} {row} out of range: the set has {plural(n, 'row')} ({flag} 0..{n - 1},"
            f" or -1..-{n} from the end); {_by_id()} finds a row by its id"
        )
    return row % n  # -1 is the last row, as in Python


def _by_id() -> str:
    """How a message names showing a row by its id: ``--id ID``, the API's ``row_id``."""
    return f"{option_name(ShowArgs, 'row_id')} ID" if on_command_line() else "row_id"


def _where_rows_went(out: OutputSet) -> str:
    """For a set without rows: where its input rows went, as the manifest counts them."""
    total = (out.manifest.get("counts") or {}).get("total") or {}
    parts = []
    if isinstance(prompts := total.get("needs_generation"), int) and prompts:
        parts.append(f"{plural(prompts, 'prompt-only row')} in prompts.jsonl")
    if isinstance(rejected := total.get("rejected"), int) and rejected:
        parts.append(f"{plural(rejected, 'rejected row')} in rejects.jsonl")
    went = f" ({', '.join(parts)})" if parts else ""
    return f"{went}; {_by_id()} says what became of a row"


def _line_with_id(path: Path, row_id: str) -> tuple[int, dict[str, Any]] | None:
    """(1-based line number, record) of the first JSONL record with ``row_id``, else None;
    read a line at a time (a set's prompts.jsonl may hold a million prompts)."""
    for i, rec in enumerate(iter_jsonl(path, []), 1):
        if isinstance(rec, dict) and rec.get("id") == row_id:
            return i, rec
    return None


def _split_per_turn(out: OutputSet, row_id: str) -> str | None:
    """For ``chat`` (or ``chat#7``) in a ``--turns each`` set holding ``chat#0``, ``chat#1``:
    the rows that input row became; None when there are none."""
    base, sep, k = row_id.rpartition("#")
    base = base if sep and k.isdigit() else row_id
    turns = [
        str(i)
        for i in out.ids()
        if isinstance(i, str) and i.startswith(f"{base}#") and i[len(base) + 1 :].isdigit()
    ]
    if not turns:
        return None
    shown = ", ".join(turns[:10]) + (f", ... ({len(turns)} rows)" if len(turns) > 10 else "")
    # as the caller names it: `--id chat#0`, the API's `row_id='chat#0'`
    first = f"--id {turns[0]}" if on_command_line() else f"row_id={turns[0]!r}"
    return (
        f"no row with id {row_id!r} in the set: it was built with --turns each, which gives"
        f" each assistant turn of input row {base!r} a row of its own: {shown}"
        f" ({first})"
    )


def _not_in_set(out: OutputSet, row_id: str) -> str:
    """Why an id is not among the set's rows: rejected (its rejects.jsonl line), queued in
    prompts.jsonl, split per turn (``--turns each``: ``ID#0``, ``ID#1``), or unknown (with ids
    that do exist)."""
    if found := _line_with_id(out.folder / "rejects.jsonl", row_id):
        i, rec = found
        file = f" (file {rec['file']})" if rec.get("file") else ""  # of a source of several
        return (
            f"id {row_id!r} is not in the set: it was rejected ({rec.get('reason')}:"
            f" {rec.get('message')}) — rejects.jsonl line {i}: source {rec.get('source')!r},"
            f" row {rec.get('row')} of that source{file} (its input row, not a"
            f" {option_name(ShowArgs, 'row')} of the set)"
        )
    if found := _line_with_id(out.folder / "prompts.jsonl", row_id):
        return (
            f"id {row_id!r} is not in the set: it is a prompt without an answer, queued in"
            f" prompts.jsonl line {found[0]} (answer it with `draftset generate` or"
            " `draftset run`)"
        )
    if split := _split_per_turn(out, row_id):
        return split
    some = [str(i) for i in out.ids()[:3]]
    return (
        f"no row with id {row_id!r} in the set, rejects.jsonl or prompts.jsonl"
        f" (ids look like: {', '.join(some)})"
    )


def row_facts(
    r: dict[str, Any], eot: set[int], block_size: int = defaults.BLOCK_SIZE
) -> dict[str, Any]:
    """Per-row numbers shown by `show` and the report."""
    ids, mask = r["input_ids"], r["loss_mask"]
    runs = supervised_runs(mask)
    m = mask == 1
    n = len(ids)
    pos = np.arange(n)
    last_end = runs[-1][1] if runs else 0
    return {
        "id": r["id"],
        "source": r["source"],
        "row (index in the set)": r["index"],
        "tokens": n,
        "supervised tokens": int(m.sum()),
        "supervised runs": len(runs),
        "truncated": bool(runs) and int(ids[last_end - 1]) not in eot,
        f"DFlash anchors (block {block_size})": int((m & (pos + block_size <= n)).sum()),
    }


UTF8_MAX_BYTES = 4  # a character split over byte-level tokens spans at most this many


def token_pieces(ids: list[int], decode: Decoder) -> list[str]:
    """Each token's text, such that a character whose bytes span several tokens (byte-level
    BPE, byte fallback) is spelled once, by the token that completes it; the tokens before it
    get "". Decoding each token alone gave one replacement character per token instead.

    Each piece is the token's text in context (a few tokens before it), so a decoder that
    strips a leading space at the start of what it decodes does not strip it inside the row.
    """
    pieces: list[str] = []
    done = 0  # tokens [0, done) are spelled
    for i in range(len(ids)):
        pending = i + 1 - done
        start = max(0, done - UTF8_MAX_BYTES)
        before = decode(ids[start:done]) if done > start else ""
        now = decode(ids[start : i + 1])
        if now.endswith("\ufffd") and pending < UTF8_MAX_BYTES and i + 1 < len(ids):
            pieces.append("")  # an incomplete character: the next tokens complete it
            continue
        pieces.append(now[len(before) :] if now.startswith(before) else decode(ids[done : i + 1]))
        done = i + 1
    return pieces


def render_row(
    r: dict[str, Any],
    decode: Decoder,
    eot: set[int],
    tokens: bool = False,
    block_size: int = defaults.BLOCK_SIZE,
    plain: bool = False,
) -> tuple[Table, Text]:
    """The facts table and the highlighted text of one row; ``plain`` (no colours) also marks
    supervised runs with ⟦…⟧ and, with ``tokens``, token boundaries with ¦."""
    facts = row_facts(r, eot, block_size)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in facts.items():
        table.add_row(k, Text(visible(str(v))))
    ids = [int(i) for i in r["input_ids"]]
    mask = r["loss_mask"]
    text = Text()
    if tokens:
        for i, piece in enumerate(token_pieces(ids, decode)):
            sup = mask[i] == 1
            if plain:
                if sup and (i == 0 or mask[i - 1] != 1):
                    text.append(MARK_OPEN)
                elif i:
                    text.append(TOKEN_SEP)
            styles = SUPERVISED_TOKEN_STYLES if sup else TOKEN_STYLES
            _append(text, piece, styles[i % 2], plain)
            if plain and sup and (i + 1 == len(ids) or mask[i + 1] != 1):
                text.append(MARK_CLOSE)
        return table, text
    pos = 0
    for s, e in supervised_runs(mask):
        _append(text, decode(ids[pos:s]), "", plain)
        if plain:
            text.append(MARK_OPEN)
        _append(text, decode(ids[s:e]), SUPERVISED_STYLE, plain)
        if plain:
            text.append(MARK_CLOSE)
        pos = e
    _append(text, decode(ids[pos:]), "", plain)
    return table, text


def show(
    folder: Path | str,
    row: int | None = None,
    row_id: str | None = None,
    tokens: bool = False,
    tokenizer: str | None = None,
    console: Console | None = None,
    block_size: int = defaults.BLOCK_SIZE,
) -> None:
    """Print one row; raises ShowError / NotADraftsetError for unusable arguments."""
    out = open_output(Path(folder))
    index = find_row(out, row, row_id)
    decode, eot = load_decoder(out, tokenizer)
    r = out.row(index)
    console = console or StdoutConsole()  # its reader leaving: `cli.main`'s to end
    plain = console.no_color or console.color_system is None
    table, text = render_row(r, decode, eot, tokens, block_size, plain)
    console.print(table)
    legend = Text()
    if plain:
        legend.append(f"supervised (loss_mask = 1): {MARK_OPEN}...{MARK_CLOSE}")
        if tokens:
            legend.append(f"  token boundaries: {TOKEN_SEP}")
    else:
        legend.append("supervised (loss_mask = 1)", style=SUPERVISED_STYLE)
        if tokens:
            legend.append("  token boundaries: alternating backgrounds", style="dim")
    legend.append("  control characters: escaped (\\x1b, \\u202e)", style="dim")
    console.print(legend)
    console.print(Panel(text, title=Text(visible(str(r["id"]))), title_align="left"))
