"""Bounded work on hostile input: templates that loop or write without end cost one row."""

from __future__ import annotations

import faulthandler
import json
import threading
import time
from pathlib import Path

import pytest
from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template

from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.mask.limits import RenderTimeout, time_limit
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

# A real template (Qwen2.5's) behind a prologue that attacks on marked rows only: a nested
# loop of 10^10 empty steps (runs for hours), one of 10^10 writes (fills memory), and one
# 100-million-character string (built from the row: a constant one is refused when the template
# loads, `test_a_huge_constant_is_refused_when_the_template_loads`).
HOSTILE = (
    "{%- set first = messages[0]['content'] -%}"
    "{%- if 'HANG' in first -%}"
    "{%- for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor -%}"
    "{%- elif 'FLOOD' in first -%}"
    "{%- for i in range(100000) %}{% for j in range(100000) %}{{ first * 10000 }}{% endfor %}"
    "{% endfor -%}"
    "{%- elif 'HUGE' in first -%}{{ first * 12500000 }}"
    "{%- endif -%}\n"
)


def chat(i: int, question: str) -> dict:
    return {
        "id": f"c{i}",
        "messages": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": f"An answer to {question}"},
        ],
    }


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    template = d / "hostile.jinja"
    template.write_text(HOSTILE + trl_template("qwen2_5").read_text(), encoding="utf-8")
    return template


def options(tmp: Path, template: Path, questions: list[str], **kw) -> BuildOptions:
    src = tmp / f"{kw.get('workers', 1)}-{len(questions)}.jsonl"
    src.write_text("".join(json.dumps(chat(i, q)) + "\n" for i, q in enumerate(questions)))
    return BuildOptions(
        sources=[Source("s", src)],
        tokenizer=str(qwen3_tokenizer_dir()),
        out=tmp / f"out-{kw.get('workers', 1)}-{len(questions)}",
        chat_template_path=str(template),
        **{"workers": 1, "render_timeout": 0.5, **kw},
    )


@pytest.fixture(autouse=True)
def no_hang():
    """A hang is a failure with a traceback, not a stuck test run."""
    faulthandler.dump_traceback_later(600, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.mark.parametrize("workers", [1, 2])
def test_hostile_rows_are_rejected_and_the_run_goes_on(tmp_path, hostile, workers):
    questions = ["Hi?", "HANG now", "Why?", "FLOOD please", "HUGE one", "How?", "HANG again"]
    res = run_build(options(tmp_path, hostile, questions, workers=workers))
    per = res.accounting.to_json()["per_source"]["s"]
    assert per["rejected_by_reason"] == {"template_timeout": 2, "template_too_large": 2}, per
    assert per["written"] == 3
    rejects = [json.loads(x) for x in (res.out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["id"], r["reason"]) for r in rejects] == [
        ("c1", "template_timeout"),
        ("c3", "template_too_large"),
        ("c4", "template_too_large"),
        ("c6", "template_timeout"),
    ]
    assert "--render-timeout 0.5 s" in rejects[0]["message"]
    assert res.manifest["options"]["render_timeout"] == 0.5
    # verify neither hangs nor re-renders the bounded rejects; it re-derives every written row
    # (rendered after the timeouts, in the same process) and finds each exactly right
    checks = run_verify(res.out, speculators=False)
    failed = [c for c in checks if c.failed and c.name != "drafter_fitness"]
    assert not failed, failed
    assert next(c for c in checks if c.name == "mask_fidelity").details["rows_checked"] == 3


def test_verify_bounds_its_own_renders(hostile):
    """verify re-renders source rows itself: with build's bound, a runaway one is named."""
    from draftset.checks.mask import bounded_expected_rows
    from draftset.core.records import Conversation
    from draftset.mask.template import ChatTemplate, TemplateSpec

    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), hostile.read_text()))
    row = chat(0, "HANG")
    conv = Conversation(row["id"], "s", 0, row["messages"])
    expected, _, error = bounded_expected_rows(tmpl, conv, "all", ("OK.",), 0.5)
    assert expected == [] and error is not None and error.startswith("template_timeout")
    row = chat(1, "HUGE")
    conv = Conversation(row["id"], "s", 1, row["messages"])
    # the size cap must stop it, not the clock: a generous timeout keeps a loaded machine
    # (CI on 2 shared cores) from timing out first
    expected, _, error = bounded_expected_rows(tmpl, conv, "all", ("OK.",), 60.0)
    assert expected == [] and error is not None and error.startswith("template_too_large")
    assert tmpl.max_chars is None  # the cap is per row, never left behind
    good = chat(2, "Hi?")
    conv = Conversation(good["id"], "s", 2, good["messages"])
    expected, _, error = bounded_expected_rows(tmpl, conv, "all", ("OK.",), 0.5)
    assert error is None and len(expected) == 1


def test_time_limit_works_off_the_main_thread():
    """The Python API called from a thread: the watchdog path, and it leaves no pending raise."""
    seen: list[str] = []

    def work() -> None:
        try:
            with time_limit(0.3):
                while True:
                    pass
        except RenderTimeout as exc:
            seen.append(str(exc))
        with time_limit(0.3):  # a block that ends in time is left alone
            time.sleep(0.05)
        time.sleep(0.5)  # nothing lands after the block
        seen.append("ok")

    t = threading.Thread(target=work)
    t.start()
    t.join(10)
    assert seen == ["rendering took longer than --render-timeout 0.3 s", "ok"]


def test_time_limit_in_the_main_thread_restores_the_alarm_handler():
    import signal

    before = signal.getsignal(signal.SIGALRM)
    with pytest.raises(RenderTimeout), time_limit(0.2):
        while True:
            pass
    with time_limit(0.2):
        pass
    time.sleep(0.4)  # the timer is off: nothing fires
    assert signal.getsignal(signal.SIGALRM) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_retry_on_the_way_out_never_leaves_the_timer_firing():
    """The timeout is raised again every 0.1 s until the block has ended. One that landed on
    the way out, in an enclosing block's exit before the timer's own (two context managers
    deep: a probe on a machine with a load of 11), replaced the first and skipped the
    disarming: the timer then fired for ever, ending the process at exit with SIGALRM."""
    import signal

    before = signal.getsignal(signal.SIGALRM)

    class SlowExit:  # an enclosing block whose exit takes longer than the retry interval
        def __enter__(self) -> None:
            self.limit = time_limit(0.2)
            self.limit.__enter__()

        def __exit__(self, *exc: object) -> bool | None:
            t0 = time.monotonic()
            while time.monotonic() - t0 < 0.5:
                pass
            return self.limit.__exit__(*exc)

    block = SlowExit()  # held, as a traceback holds the frames of the blocks it passed
    try:
        with pytest.raises(RenderTimeout), block:
            while True:
                pass
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert signal.getsignal(signal.SIGALRM) == before
    finally:  # before the fix: the timer is still running; stop it for the other tests
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


def test_a_timer_that_fires_before_the_block_starts_is_disarmed():
    """``render_timeout: 0.000001`` (a recipe's) printed its one line, then the process died
    of SIGALRM (exit 142, "Alarm clock"): the first alarm landed as the timer was started,
    before the block that disarms it, and its 0.1 s retries outlived the handler."""
    import signal

    before = signal.getsignal(signal.SIGALRM)
    try:
        for _ in range(20):
            with pytest.raises(RenderTimeout), time_limit(1e-6):
                time.sleep(0.01)
            assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
            assert signal.getsignal(signal.SIGALRM) == before
    finally:  # before the fix: the timer is still running; stop it for the other tests
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)


# --- too_long without tokenizing everything -------------------------------------------------
def _qwen_backend():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(qwen3_tokenizer_dir() / "tokenizer.json"))


def test_token_bytes_bound_of_real_tokenizers():
    from tokenizers import Tokenizer

    from draftset.mask.encode import token_bytes_bound

    assert token_bytes_bound(_qwen_backend()) == 128 * 4  # 128-byte tokens, NFC
    llama = Tokenizer.from_file(str(llama32_tokenizer_dir() / "tokenizer.json"))
    assert token_bytes_bound(llama) == 128  # no normalizer
    # a pipeline that drops text (whitespace splitting) or fuses unknown characters: no bound
    from tokenizers import models, pre_tokenizers

    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    assert token_bytes_bound(wp) is None
    bpe = Tokenizer(models.BPE({"a": 0}, [], unk_token="a", fuse_unk=True))
    assert token_bytes_bound(bpe) is None
    ws = Tokenizer(models.BPE({"a": 0}, []))
    ws.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    assert token_bytes_bound(ws) is None


HARD_TEXTS = [
    "plain english words and sentences, " * 4,
    "汉字和日本語のテキスト" * 3,
    "\u1100\u1161\u11a8" * 20,  # Hangul jamo: NFC makes 9 bytes 3
    "\u03b9\u0308\u0301" * 20,  # iota + marks: NFC composes to ΐ
    " " * 300 + "x",  # runs the vocabulary has long tokens for
    "-" * 500,
    "<|im_end|><|im_start|>" * 10,  # special tokens written in the text
    "😀👍🏽" * 30,
]


def test_lower_bound_never_exceeds_the_real_count():
    from draftset.mask.encode import _utf8_len, token_bytes_bound

    tok = _qwen_backend()
    k = token_bytes_bound(tok)
    assert k is not None
    vocab = tok.get_vocab(with_added_tokens=False)
    longest = max(vocab, key=len)  # the worst case for the bound: the longest tokens, repeated
    texts = [*HARD_TEXTS, tok.decode([vocab[longest]]) * 50]
    for text in texts:
        n = len(tok.encode(text, add_special_tokens=False).ids)
        assert -(-_utf8_len(text) // k) <= n, text[:20]


@pytest.mark.parametrize(("truncation", "min_sup"), [("drop", 1), ("truncate", 1), ("truncate", 0)])
def test_verdict_equals_full_tokenization_around_the_threshold(truncation, min_sup):
    """Rows from far under to far over the length where the shortcut starts: the same rows,
    rejects and truncation flags as tokenizing everything."""
    from draftset.mask.encode import LengthRules, encode_plans, finish_row, token_bytes_bound
    from draftset.mask.render import RowPlan

    tok = _qwen_backend()
    k = token_bytes_bound(tok)
    rules = LengthRules(max_length=8, truncation=truncation, min_supervised_tokens=min_sup)
    plans = []
    for base in HARD_TEXTS:
        for target in (7 * k, 8 * k - 1, 8 * k, 8 * k + 1, 9 * k, 40 * k):
            text = (base * (target // len(base.encode()) + 1)).encode()[:target]
            text_s = text.decode("utf-8", "ignore")
            for segs in (
                [(text_s, False), ("answer<|im_end|>", True)],
                [("q", False), (text_s + "<|im_end|>", True), ("\n", False)],
                [("<|im_start|>user\n", False), ("hi<|im_end|>", True), (text_s, False)],
            ):
                plans.append(RowPlan(f"r{len(plans)}", "s", len(plans), segs))
    fast = [
        finish_row(p, e, rules)
        for p, e in zip(plans, encode_plans(tok, plans, rules, k), strict=True)
    ]
    full = [finish_row(p, e, rules) for p, e in zip(plans, encode_plans(tok, plans), strict=True)]
    shortcuts = 0
    for a, b in zip(fast, full, strict=True):
        assert type(a) is type(b)
        if hasattr(a, "reason"):
            assert a.reason == b.reason
            shortcuts += "not tokenized" in a.message
        else:
            assert a.input_ids.tolist() == b.input_ids.tolist()
            assert a.loss_mask.tolist() == b.loss_mask.tolist()
            assert a.truncated == b.truncated
    assert shortcuts > 0 or min_sup == 0  # the shortcut was taken, and agreed


def test_normal_forms_shrink_text_at_most_4_times():
    """The factor behind the bound: the most UTF-8 bytes NFC/NFKC turn into one byte.

    Worst input for a composed character: each of its canonical components written as the
    longest single code point that decomposes to it (assigned code points only)."""
    import sys
    import unicodedata as ud

    chars = [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    chars = [c for c in chars if ud.category(c) != "Cn"]
    for form, dec in (("NFC", "NFD"), ("NFKC", "NFKD")):
        longest: dict[str, int] = {}
        for x in chars:
            d = ud.normalize(dec, x)
            assert ud.normalize(form, x) != ""
            if len(d) == 1:
                longest[d] = max(longest.get(d, 0), len(x.encode()))
        worst = 0.0
        for c in chars:
            if ud.normalize(form, c) != c:
                continue
            parts = ud.normalize(dec, c)
            src = sum(max(longest.get(p, 0), len(p.encode())) for p in parts)
            worst = max(worst, src / len(c.encode()))
        assert worst <= 4, form


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "soon"])
def test_bad_render_timeout_is_one_line_exit_2(tmp_path, capsys, value):
    from draftset.cli import main

    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(chat(0, "Hi?")) + "\n")
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir())]
    argv += ["--out", str(tmp_path / "o"), "--render-timeout", value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--render-timeout" in err[0], err
    assert not (tmp_path / "o").exists()


def test_render_timeout_from_a_recipe(tmp_path):
    from draftset.api import build_options
    from draftset.cli import _build_parser
    from draftset.commands.build import build_arguments

    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(chat(0, "Hi?")) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        f"tokenizer: {qwen3_tokenizer_dir()}\nout: o\nrender_timeout: 2.5\nsources: [a.jsonl]\n"
    )
    args = _build_parser().parse_args(["build", str(recipe)])
    assert build_options(**build_arguments(args)).render_timeout == 2.5
    args = _build_parser().parse_args(["build", str(recipe), "--render-timeout", "0"])
    assert (
        build_options(**build_arguments(args)).render_timeout == 0
    )  # the command line wins; 0 = no bound


@pytest.mark.parametrize("truncation", ["drop", "truncate"])
def test_a_row_far_over_max_length_is_never_tokenized(tmp_path, monkeypatch, truncation):
    """A 3 MB question (> 4096 tokens x 512 bytes): rejected, and the tokenizer never sees it."""
    import draftset.mask.encode

    longest: list[int] = [0]
    real = draftset.mask.encode._encode_batch

    def spy(backend):
        encode = real(backend)

        def wrapped(texts, **kw):
            longest[0] = max([longest[0], *map(len, texts)])
            return encode(texts, **kw)

        return wrapped

    monkeypatch.setattr(draftset.mask.encode, "_encode_batch", spy)
    src = tmp_path / "a.jsonl"
    rows = [chat(0, "Hi?"), chat(1, "the quick brown fox. " * 150_000)]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_build(
        BuildOptions(
            [Source("s", src)],
            str(qwen3_tokenizer_dir()),
            tmp_path / "o",
            workers=1,
            truncation=truncation,
            dedup="none",
        )
    )
    per = res.accounting.to_json()["per_source"]["s"]
    want = "too_long" if truncation == "drop" else "too_few_supervised_tokens"
    assert per["written"] == 1 and per["rejected_by_reason"] == {want: 1}
    assert longest[0] < 10_000  # only the short row's segments were tokenized


def test_verify_stops_a_flooding_render_at_the_cap(tmp_path):
    """verify's own render (transformers' public path) joined all a template wrote and looked
    at the size after: a flooding row grew verify's memory until the timer fired (1.4 GB at
    build's 5 s, 3.4 GB at 15 s, a template 10^10 writes long at --render-timeout 0 without
    end) while build stopped at the cap. A row that writes past the cap and fails after it
    shows which: stopped at the cap it is `template_too_large`, rendered to the end a
    `template_error`."""
    from draftset.checks.mask import bounded_expected_rows
    from draftset.core.records import Conversation
    from draftset.mask.template import ChatTemplate, TemplateSpec

    late = (
        "{%- if 'LATE' in messages[0]['content'] -%}"
        "{%- for i in range(5000) %}{{ 'LATE' * 1000 }}{% endfor -%}"  # 20M > the 16.8M cap
        "{{ raise_exception('written past the cap') }}"
        "{%- endif -%}\n"
    )
    text = late + trl_template("qwen2_5").read_text()
    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), text))
    row = chat(0, "LATE")
    conv = Conversation(row["id"], "s", 0, row["messages"])
    expected, _, error = bounded_expected_rows(tmpl, conv, "all", ("OK.",), 60.0)
    assert expected == [] and error is not None, error
    assert error.startswith("template_too_large"), error
    assert tmpl.max_chars is None
    good = chat(1, "Hi?")
    conv = Conversation(good["id"], "s", 1, good["messages"])
    expected, _, error = bounded_expected_rows(tmpl, conv, "all", ("OK.",), 5.0)
    assert error is None and len(expected) == 1


# --- every render is bounded: compile, probes, and values built inside a render (issue 25) ----
def _traced_peak(fn) -> int:
    """Peak bytes Python allocated while ``fn`` ran (its own memory, not the process's)."""
    import tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture(scope="module")
def qwen_template():
    from draftset.mask.template import ChatTemplate, TemplateSpec

    return ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir())))


def test_compiling_never_evaluates_a_huge_constant():
    """Jinja folds constant expressions while compiling: ``'x' * 3000000000`` was built (9.2 GB,
    71 s) even in a branch never taken. Intercepted operators are never folded."""
    from draftset.mask.sandbox import compile_template

    compile_template("{{ 1 }}")  # transformers' own environment, built once per process
    text = "{% if false %}{% set s = 'x' * 20000000 %}{% endif %}{{ messages[0].content }}"
    peak = _traced_peak(lambda: compile_template(text))
    assert peak < 5_000_000, f"compiling allocated {peak:,} bytes"


@pytest.mark.parametrize(
    "expression",
    [
        "'x' * 5000000",
        "5000000 * 'x'",
        "['x'] * 5000000",
        "10 ** 3000000",
        "'x'.ljust(5000000)",
        "'x'.center(5000000)",
        "'x'.zfill(5000000)",
        "('\t' * 1000).expandtabs(5000)",
    ],
)
def test_a_huge_value_is_refused_before_it_is_built(qwen_template, expression):
    """A render stops at the row's cap before the value exists (a 3-billion-character string
    peaked at 3.4 GB before the reject): the size is computed from the operands."""
    from draftset.mask.limits import RenderTooLarge

    tmpl = qwen_template
    own = tmpl._compiled
    tmpl._compiled = own.environment.from_string(
        "{% set s = " + expression + " %}{{ messages[0].content }}"
    )
    tmpl.max_chars = 1_000_000
    msgs = [{"role": "user", "content": "Hi"}]

    def render() -> None:
        with pytest.raises(RenderTooLarge, match="more than the 1,000,000 a render may write"):
            tmpl.render(msgs)

    try:
        peak = _traced_peak(render)
    finally:
        tmpl.max_chars = None
        tmpl._compiled = own
    assert peak < 3_000_000, f"rendering allocated {peak:,} bytes"


def test_values_within_the_cap_are_built_as_before(qwen_template):
    tmpl = qwen_template
    own = tmpl._compiled
    msgs = [{"role": "user", "content": "Hi"}]
    try:
        text = "{{ ('ab' * 3) + 'c' * 2 ~ 2 ** 10 ~ 'x'.rjust(3) ~ ([1] * 2 + [3]) }}"
        tmpl._compiled = own.environment.from_string(text)
        assert tmpl.render(msgs) == "abababcc1024  x[1, 1, 3]"
        # without a row's cap (the probes, the API's own renders) the floor applies: 16 Mi
        tmpl._compiled = own.environment.from_string("{{ ('x' * 5000000) | length }}")
        assert tmpl.render(msgs) == "5000000"
    finally:
        tmpl._compiled = own


@pytest.mark.parametrize(
    ("attack", "said"),
    [
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "longer than --render-timeout 0.5 s",
        ),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{{ 'y' * 1000 }}"
            "{% endfor %}{% endfor %}",
            "more than",
        ),
    ],
)
def test_a_template_that_hangs_or_floods_its_probes_is_one_usage_line(tmp_path, attack, said):
    """The probes (content parts, reasoning, end of turn) rendered without any bound: a nested
    loop hung 600 s inside the content-parts probe, a flood grew to 1.6 GB in 40 s."""
    from draftset.core.errors import UsageError

    template = tmp_path / "bad.jinja"
    template.write_text(attack + trl_template("qwen2_5").read_text(), encoding="utf-8")
    t0 = time.monotonic()
    with pytest.raises(UsageError) as err:
        run_build(options(tmp_path, template, ["Hi?"], render_timeout=0.5))
    assert time.monotonic() - t0 < 60
    line = str(err.value)
    assert "\n" not in line and str(template) in line and said in line, line
    assert err.value.exit_code == 2


def test_a_huge_constant_is_refused_when_the_template_loads(tmp_path):
    """transformers' public renderer (verify's stop-token probe, the tag cross-check) compiles
    with constant folding: such a template is one usage line before any of them runs."""
    from draftset.core.errors import UsageError

    template = tmp_path / "bomb.jinja"
    bomb = "{% if false %}{% set s = 'x' * 3000000000 %}{% endif %}"
    template.write_text(bomb + trl_template("qwen2_5").read_text(), encoding="utf-8")
    with pytest.raises(UsageError) as err:
        run_build(options(tmp_path, template, ["Hi?"]))
    line = str(err.value)
    assert str(template) in line and "3,000,000,000 characters" in line, line


def test_build_and_verify_work_the_token_bytes_bound_out_once_per_renderer(monkeypatch):
    """build's row step and verify's length bound each kept their own cache of
    `token_bytes_bound` (~1 s a tokenizer): the step per step, verify in a module dict keyed
    by the template's id (which also kept every template alive). It is now the renderer's
    `token_bytes`, worked out once whoever asks first."""
    from draftset.checks.mask import Expected, _tokens_at_least
    from draftset.core.records import Conversation
    from draftset.mask import encode
    from draftset.mask.template import ChatTemplate, TemplateSpec
    from draftset.pipeline.build import mask_config

    calls: list[object] = []
    real = encode.token_bytes_bound

    def counted(backend):
        calls.append(backend)
        return real(backend)

    monkeypatch.setattr(encode, "token_bytes_bound", counted)
    spec = TemplateSpec(tokenizer=str(qwen3_tokenizer_dir()))
    tmpl = ChatTemplate(spec)
    opts = BuildOptions([], str(qwen3_tokenizer_dir()), Path("unused"), max_length=64)

    class Info:  # what `mask_config` reads of a loaded template's facts
        kit = None
        vocab_size = len(tmpl.tokenizer)

    step = mask_config(opts, spec, Info()).build(tmpl)  # type: ignore[arg-type]
    long = "q " * 2_000  # > 16 bytes a token x max_length: the bound is asked
    row = Conversation(
        "long", "s", 0, [{"role": "user", "content": long}, {"role": "assistant", "content": "a"}]
    )
    step.process([row])
    assert calls == [tmpl.backend]  # build's step asked it
    assert _tokens_at_least(tmpl, Expected(long * 2, []), 64) > 0  # verify asks the same one
    assert calls == [tmpl.backend]  # ... and it was not worked out again
