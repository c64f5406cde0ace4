"""Every option of every job, declared once: name, type, default, help, bounds (docs/api.md).

Each model is read three ways (`config.fields`): the command layer turns its fields into
argparse options (`commands.options.add_options`), the API validates its keyword arguments
through it, and a recipe's values are validated by it strictly (YAML's types are exact:
``max_tokens: "64"`` is one line naming the key, exit code 2). A field's name is the API's
keyword and the recipe's key; its `Cli` marker says how the command line spells it.

An option shared by two jobs is one annotated type below (``Concurrency``, ``Workers``...),
so `draftset generate`'s ``--concurrency`` and a recipe's ``generate.concurrency`` cannot drift.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from draftset.config.fields import (
    EMPTY_IS_NONE,
    NOT_IN_RECIPE,
    NOT_ON_CLI,
    Cli,
    finite,
    not_blank,
    one_of,
    recipe_keys,
)
from draftset.core import defaults
from draftset.engine import CHOICES as ENGINE_CHOICES

PathLike = Annotated[str | Path, AfterValidator(not_blank)]  # never empty nor only blanks
Strings = str | list[str]
PathList = PathLike | list[PathLike]
JsonObject = dict[str, Any] | str  # the command line gives JSON text
INPUT_FORMATS = "draftset.sources.normalize:FORMATS"  # the row shapes `normalize` reads
OUTPUT_FORMATS = "draftset.output:FORMATS"
SERVING_ENGINES = "draftset.mask.serving:SERVING_ENGINES"
UNSET = "default: not sent, the server's own"


class Options(BaseModel):
    """A job's options: unknown names refused, values checked on assignment too."""

    # defer_build: the validators are built on first use, not when `draftset build` builds its
    # parser (~90 ms before its helper process could start loading the template)
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, defer_build=True)


# --- options two jobs share ---------------------------------------------------------------------
Tokenizer = Annotated[
    PathLike | None,
    Field(description="tokenizer folder, or hub id (offline: one the hub cache holds)"),
]
Seed = Annotated[int, Field(description="seed of the sampling (default {default})")]
Workers = Annotated[
    int,
    Field(
        ge=0,
        description="render/encode processes (default and 0: all cores; output is identical"
        " for any N)",
    ),
]
Engine = Annotated[
    str,
    *one_of(ENGINE_CHOICES),
    Field(
        description="where render/encode runs: local processes (default) or Ray actors on a"
        " cluster (needs draftset[ray]; same output bytes; --workers then counts actors,"
        " default all the cluster's CPUs)"
    ),
]
RayAddress = Annotated[
    str | None,
    Cli(metavar="ADDR"),
    Field(
        description="--engine ray: the cluster to join (auto, HOST:PORT or ray://HOST:PORT;"
        " default: RAY_ADDRESS, else a private Ray on this machine)"
    ),
]
InputFormat = Annotated[
    str | None,
    *one_of(INPUT_FORMATS),
    NOT_IN_RECIPE,
    Field(
        description="force the row shape of the command-line sources (default: detected per row)"
    ),
]
FieldMap = Annotated[
    dict[str, str] | list[str] | None,
    Cli(flags=("--field",), action="append", metavar="CANONICAL=COLUMN"),
    NOT_IN_RECIPE,
    Field(description="map a column to a canonical field, e.g. instruction=text (repeatable)"),
]
Preset = Annotated[
    str | None,
    NOT_IN_RECIPE,
    Field(
        description="column layout of a known public set for the command-line sources"
        " (openorca, ultrachat-200k, xlam-function-calling-60k, ...; see docs/mixtures.md)"
    ),
]
Placeholders = Annotated[
    Strings | None,
    Cli(flags=("--placeholder",), action="append"),
    Field(
        description="answer text never supervised (repeatable; replaces 'OK.', 'OK': give"
        " them too to keep them; empty answers always)"
    ),
]
BlockSize = Annotated[
    int,
    # at most int32's largest: the anchor counts are int64 arithmetic on token positions
    Field(
        ge=2, le=2**31 - 1, description="DFlash block size for anchor counts (default {default})"
    ),
]
# generation: the servers and what each request asks of the model
Endpoints = Annotated[
    Strings,
    Cli(flags=("--endpoint",), action="append", metavar="URL"),
    Field(description="server base URL, e.g. http://127.0.0.1:8000/v1 (repeatable)"),
]
Model = Annotated[
    str | None, Field(description="served model name (default: the one /v1/models lists)")
]
Concurrency = Annotated[
    int, Field(ge=1, description="requests in flight per endpoint (default {default})")
]
RequestTimeout = Annotated[
    float,
    AfterValidator(finite),
    Cli(metavar="SECONDS"),
    Field(gt=0, description="whole-request deadline (default {default})"),
]
MaxRetries = Annotated[
    int,
    Field(
        ge=0,
        description="retries of a failed request; 429/503 throttles are waited out without"
        " spending them, up to --give-up-after (default {default})",
    ),
]
Temperature = Annotated[
    float | None,
    AfterValidator(finite),
    Field(ge=0, description=f"sampling temperature sent with each request ({UNSET})"),
]
# the ranges vLLM 0.33 and SGLang both accept: a top_p of 0 or a top_k under -1 was sent, and
# every request came back 400 (each row an http_4xx error, the run "no row answered")
TopP = Annotated[float | None, Field(gt=0, le=1, description=f"nucleus sampling top_p ({UNSET})")]
TopK = Annotated[
    int | None, Field(ge=-1, description=f"top_k sampling, e.g. 20; -1: off ({UNSET})")
]
MaxTokens = Annotated[
    int | None,
    Field(
        ge=1,
        description="longest answer in tokens; a cut answer goes to the errors file"
        f" unless --keep-length ({UNSET}: vLLM's is the context left)",
    ),
]
# vLLM 0.33's request takes a seed in int64 (`ge=-(2**63), le=2**63-1`): past it, every request
# came back 400
SamplingSeed = Annotated[
    int | None,
    Field(
        ge=-(2**63),
        le=2**63 - 1,
        description="sent with each request; also seeds --thinking mix:F",
    ),
]
ExtraBody = Annotated[
    JsonObject | None,
    Cli(metavar="JSON"),
    Field(description="JSON object merged into each request body"),
]
Thinking = Annotated[
    str | bool | None,
    Cli(metavar="on|off|mix:F", type=str),
    Field(
        description="enable_thinking per row; mix:F turns it on for a seeded fraction F"
        " (default on)"
    ),
]
ReturnTokenIds = Annotated[
    bool,
    Cli(action="store_true"),
    Field(description="ask for token ids (vLLM return_token_ids) and keep them in metadata"),
]


# --- build --------------------------------------------------------------------------------------
class SourceEntry(Options):
    """One entry of a recipe's ``sources:`` (or a mapping given to `api.build(sources=...)`)."""

    path: PathLike
    name: Annotated[str | None, AfterValidator(not_blank)] = None  # never blank
    # a share of --max-samples (0: none of it); finite, so shares can be split
    weight: float | None = Field(None, ge=0, allow_inf_nan=False)
    count: int | None = Field(None, ge=0)
    format: Annotated[str | None, *one_of(INPUT_FORMATS)] = None
    fields: dict[str, str] | None = None
    preset: str | None = None


class BuildArgs(Options):
    """`draftset build` / `draftset.api.build` / a build recipe's top-level keys."""

    sources: Annotated[
        list[Any] | None,
        NOT_ON_CLI,  # the command line's positional SOURCEs (the command reads them)
        Field(description="paths, `Source` objects or recipe-style mappings"),
    ] = None
    tokenizer: Tokenizer = None
    chat_template: Annotated[
        PathLike | None, Field(description="Jinja file overriding the tokenizer's template")
    ] = None
    template_kwargs: Annotated[
        JsonObject | None,
        Field(
            description="JSON object passed to the template, e.g. '{\"enable_thinking\": false}'"
        ),
    ] = None
    format: InputFormat = None
    fields: FieldMap = None
    preset: Preset = None
    turns: Annotated[
        str,
        *one_of(defaults.TURN_MODES),
        Field(
            description="which assistant turns to supervise: all = every turn the template"
            " renders as it was generated, in one row (default); last = only the final turn;"
            " each = one row per turn, its context as the server saw it (docs/semantics.md)"
        ),
    ] = defaults.TURNS
    max_length: Annotated[
        int, Field(ge=1, description="max tokens per row (default {default})")
    ] = defaults.MAX_LENGTH
    truncation: Annotated[
        str,
        *one_of(defaults.TRUNCATIONS),
        Field(description="over-long rows: reject or cut (default {default})"),
    ] = defaults.TRUNCATION
    min_supervised_tokens: Annotated[
        int, Field(ge=0, description="reject rows with fewer (default {default})")
    ] = defaults.MIN_SUPERVISED_TOKENS
    eot_tokens: Annotated[
        Strings | None,
        Cli(flags=("--eot-token",), action="append"),
        EMPTY_IS_NONE,
        Field(
            description="extra stop token, added to generation_config.json's eos_token_id"
            " (repeatable; default: none)"
        ),
    ] = None
    placeholders: Placeholders = None
    render_timeout: Annotated[
        float,
        AfterValidator(finite),
        Cli(metavar="SECONDS"),
        Field(
            ge=0,
            # the alarm's timer takes no more (1e12 s was `OverflowError: timestamp out of
            # range for platform time_t` from inside the build); 0 is the way to say none
            le=defaults.RENDER_TIMEOUT_MAX,
            description="reject a row whose template render takes longer"
            " (template_timeout; default {default}, 0 = no bound)",
        ),
    ] = defaults.RENDER_TIMEOUT
    max_samples: Annotated[
        int | None,
        Field(ge=0, description="total rows to take, split over sources by weight"),
    ] = None
    seed: Seed = defaults.SEED
    dedup: Annotated[
        str,
        *one_of(defaults.DEDUPS),
        Field(
            description="drop duplicates: exact content hash (default), + MinHash"
            " near-duplicates, or none"
        ),
    ] = defaults.DEDUP
    near_dup_threshold: Annotated[
        float,
        Field(
            gt=0,  # 0 is no threshold: the near deduper refuses it (it was a traceback)
            le=1,
            allow_inf_nan=False,
            description="Jaccard threshold for --dedup near ({default})",
        ),
    ] = defaults.NEAR_DUP_THRESHOLD
    decontaminate: Annotated[
        PathList | None,
        Cli(action="append", metavar="FILE"),
        EMPTY_IS_NONE,
        Field(
            description="benchmark prompts (a data file build reads, or .txt one per line); rows"
            " sharing a 13-word n-gram with one are removed (repeatable)"
        ),
    ] = None
    mix: Annotated[
        dict[str, Any] | None,
        NOT_ON_CLI,
        Field(description="`modes` and/or `sources` share mappings (docs/mixtures.md)"),
    ] = None
    out: Annotated[
        PathLike | None,
        Field(description="output folder (refused if it exists, unless --overwrite)"),
    ] = None
    overwrite: Annotated[
        bool,
        Cli(action="store_true"),
        Field(description="replace an existing output folder"),
    ] = False
    workers: Workers = defaults.WORKERS
    engine: Engine = defaults.ENGINE
    ray_address: RayAddress = None
    draft_vocab_size: Annotated[
        int | None, Field(ge=1, description="also write d2t-N.npy / t2d-N.npy (EAGLE-3)")
    ] = None
    target_vocab_size: Annotated[
        int | None,
        Field(ge=1, description="target vocabulary when the tokenizer folder has no config.json"),
    ] = None
    output_format: Annotated[
        str,
        *one_of(OUTPUT_FORMATS),
        Field(
            description="arrow: HF save_to_disk folder, read as-is by speculators (default);"
            " parquet: data/train-*.parquet shards for datasets.load_dataset and the hub"
        ),
    ] = defaults.OUTPUT_FORMAT
    serving_engine: Annotated[
        str | None,
        *one_of(SERVING_ENGINES),
        Field(
            description="prepare tools as this engine does before rendering (default vllm;"
            " transformers = as given; docs/semantics.md)"
        ),
    ] = None  # None: the engine `mask.serving` names its default


# --- generate -----------------------------------------------------------------------------------
class GenerateArgs(Options):
    """`draftset generate` / `draftset.api.generate`."""

    sources: Annotated[
        PathLike | list[Any],  # each as build's: a path, a `Source` or a mapping (api.py)
        Cli(positional=True, nargs="+", metavar="SOURCE"),
        Field(description="anything `draftset build` reads, or a build recipe"),
    ]
    endpoints: Annotated[
        Endpoints, Cli(flags=("--endpoint",), action="append", metavar="URL", required=True)
    ]
    out: Annotated[
        PathLike,
        Cli(required=True),
        Field(description="output JSONL (errors go to OUT.errors.jsonl)"),
    ]
    model: Model = None
    api_key: Annotated[
        str | None,
        Field(
            description="bearer token sent to the endpoints; better set DRAFTSET_API_KEY or"
            " OPENAI_API_KEY (read when this is not given) so it stays out of the shell"
            " history and process list"
        ),
    ] = None
    format: InputFormat = None
    fields: FieldMap = None
    preset: Preset = None
    concurrency: Concurrency = defaults.CONCURRENCY
    request_timeout: RequestTimeout = defaults.REQUEST_TIMEOUT
    max_retries: MaxRetries = defaults.MAX_RETRIES
    backoff: Annotated[
        float,
        Cli(metavar="SECONDS"),
        Field(ge=0, description="base of the exponential backoff with jitter (default {default})"),
    ] = defaults.BACKOFF
    backoff_cap: Annotated[
        float,
        Cli(metavar="SECONDS"),
        Field(ge=0, description="longest backoff (default {default})"),
    ] = defaults.BACKOFF_CAP
    health_interval: Annotated[
        float,
        Cli(metavar="SECONDS"),
        Field(gt=0, description="how often an ejected endpoint is probed (default {default})"),
    ] = defaults.HEALTH_INTERVAL
    give_up_after: Annotated[
        float,
        Cli(metavar="SECONDS"),
        Field(
            gt=0,
            description="stop (exit 1, resumable) when no endpoint is healthy this long;"
            " also the most a request waits out 429/503 throttles in all (default {default})",
        ),
    ] = defaults.GIVE_UP_AFTER
    temperature: Temperature = None
    top_p: TopP = None
    top_k: TopK = None
    max_tokens: MaxTokens = None
    seed: SamplingSeed = None
    extra_body: ExtraBody = None
    chat_template_kwargs: Annotated[
        JsonObject | None,
        Cli(metavar="JSON"),
        Field(description="JSON object sent as chat_template_kwargs"),
    ] = None
    thinking: Thinking = None
    return_token_ids: ReturnTokenIds = False
    keep_length: Annotated[
        bool,
        Cli(action="store_true"),
        Field(
            description="keep answers cut at max_tokens in the output (flagged), not in the"
            " errors file"
        ),
    ] = False
    retry_errors: Annotated[
        bool,
        Cli(action="store_true"),
        Field(
            description="retry rows whose error is invalid_response / model_mismatch /"
            " retries_exhausted / unfinished / generate_internal_error"
        ),
    ] = False
    tokenizer: Annotated[
        PathLike | None,
        Cli(metavar="DIR"),
        Field(
            description="the target's tokenizer folder: a special token's text (<|im_end|>)"
            " ending an answer is cut (a leaked stop token), anywhere else it fails the row"
            " special_token_in_answer"
        ),
    ] = None
    max_response_bytes: Annotated[
        int,
        Cli(metavar="N"),
        Field(
            ge=1024,
            description="largest response body, also after gzip/deflate decoding; a"
            " larger one is that row's error response_too_large (default {default} = 32 MiB)",
        ),
    ] = defaults.MAX_RESPONSE_BYTES
    restart: Annotated[
        bool,
        Cli(action="store_true"),
        Field(
            description="discard the answers of an earlier run on this --out (its output,"
            " errors and run file only; refused for a file draftset did not write) instead"
            " of resuming"
        ),
    ] = False


class GenerateSection(Options):
    """A recipe's ``generate:`` section for `draftset run` (names as `draftset generate`'s)."""

    endpoints: Endpoints
    model: Model = None
    api_key_env: Annotated[str, Field(description="the variable holding the servers' API key")] = (
        defaults.API_KEY_ENV
    )
    thinking: Thinking = None  # on | off | mix:F (default: the template kwargs', else on)
    max_tokens: MaxTokens = None
    temperature: Temperature = None
    top_p: TopP = None
    top_k: TopK = None
    seed: SamplingSeed = None
    extra_body: Annotated[dict[str, Any] | None, Field(description="merged into each body")] = None
    concurrency: Concurrency = defaults.CONCURRENCY
    request_timeout: RequestTimeout = defaults.REQUEST_TIMEOUT
    max_retries: MaxRetries = defaults.MAX_RETRIES
    regenerate: Annotated[
        str,
        *one_of(defaults.REGENERATE),
        Field(description="which rows the target answers again"),
    ] = "missing"
    return_token_ids: ReturnTokenIds = False


class VerifySection(Options):
    """A recipe's ``verify:`` section for `draftset run`."""

    render_server: Annotated[str | None, Field(description="a vLLM render server's URL")] = None


# --- run ----------------------------------------------------------------------------------------
class RunArgs(Options):
    """`draftset run RECIPE.yaml` / `draftset.api.run`: what may replace the recipe's values."""

    # where in the recipe a name of build's or generate's goes (`run(recipe, out=...)` was
    # told only "not an option"; the command line says so too, `commands.run.recipe_place`):
    # said after "is not an option of this job:"; filled below, from the models
    WORDS: ClassVar[dict[str, str]] = {}

    recipe: Annotated[PathLike, Cli(positional=True, metavar="RECIPE.yaml")]
    restart: Annotated[
        bool,
        Cli(action="store_true"),
        Field(description="start over: remove this run's work files and output first"),
    ] = False
    retry_errors: Annotated[
        bool,
        Cli(action="store_true"),
        Field(
            description="ask again the rows whose generation failed retries_exhausted /"
            " invalid_response / model_mismatch / unfinished / generate_internal_error, then"
            " build and verify again"
        ),
    ] = False
    endpoints: Annotated[
        Strings | None,
        Cli(flags=("--endpoint",), action="append", metavar="URL"),
        Field(description="server base URL replacing the recipe's endpoints (repeatable)"),
    ] = None
    tokenizer: Annotated[
        PathLike | None,
        Field(description="tokenizer folder replacing the recipe's `tokenizer:`"),
    ] = None
    work: Annotated[
        PathLike | None,
        Cli(metavar="DIR"),
        Field(description="work folder (default: OUT.run beside OUT)"),
    ] = None
    workers: Annotated[
        int | None, Field(ge=0, description="build processes (default: all cores)")
    ] = None
    engine: Annotated[
        str | None,
        *one_of(ENGINE_CHOICES),
        Field(
            description="where the build's render/encode runs (default local; ray needs"
            " draftset[ray])"
        ),
    ] = None
    ray_address: Annotated[
        str | None,
        Cli(metavar="ADDR"),
        Field(description="--engine ray: the cluster (auto, HOST:PORT, ray://)"),
    ] = None
    speculators: Annotated[
        bool, NOT_ON_CLI, Field(description="verify's speculators-loader check")
    ] = True


# --- verify, report, show -------------------------------------------------------------------
SetDir = Annotated[
    PathLike,
    Cli(positional=True, metavar="DIR"),
    Field(description="a folder written by `draftset build`"),
]
ManifestTokenizer = Annotated[
    PathLike | None, Field(description="tokenizer folder (default: the path in the manifest)")
]


with warnings.catch_warnings():  # `json` is verify's keyword; BaseModel.json is deprecated
    warnings.simplefilter("ignore", UserWarning)

    class VerifyArgs(Options):
        """`draftset verify DIR` / `draftset.api.verify`."""

        dir: SetDir
        tokenizer: ManifestTokenizer = None
        sample: Annotated[
            int | None,
            Field(
                ge=1,
                description="mask-check N seeded rows (default: all rows of sets up to"
                " 20,000, else 2,000)",
            ),
        ] = None
        seed: Annotated[int, Field(description="seed of --sample (default {default})")] = 0
        block_size: BlockSize = defaults.BLOCK_SIZE
        placeholders: Annotated[
            Strings | None,
            Cli(flags=("--placeholder",), action="append"),
            Field(
                description="placeholder answer never to be supervised (repeatable; default: the"
                " manifest's list, else 'OK.', 'OK'; empty answers always)"
            ),
        ] = None
        fast: Annotated[
            bool,
            Cli(action="store_true"),
            Field(description="only the fast checks (no sources, no tokenizer)"),
        ] = False
        render_server: Annotated[
            str | None,
            Cli(metavar="URL"),
            Field(
                description="also compare every checked row's context and supervised tokens with"
                " the renders of this serving engine (`vllm launch render`; docs/verify.md)"
            ),
        ] = None
        json: Annotated[
            PathLike | None,
            Cli(metavar="FILE"),
            Field(description="write every check result as JSON to FILE"),
        ] = None
        speculators: Annotated[
            bool, NOT_ON_CLI, Field(description="check that speculators' loader reads the set")
        ] = True


def _run_words() -> dict[str, str]:
    """`RunArgs.WORDS`: each recipe key of build's, ``generate:``'s and ``verify:``'s that is
    no option of run's, with where the recipe holds it (a key of both: the top level)."""
    words: dict[str, str] = {}
    for model, where in (
        (VerifySection, "under its `verify:`"),
        (GenerateSection, "under its `generate:`"),
        (BuildArgs, "at its top level"),
    ):
        for name in recipe_keys(model):
            if name not in RunArgs.model_fields:
                words[name] = f"run reads {name} from its recipe: set `{name}: ...` {where}"
    return words


RunArgs.WORDS = _run_words()


class ReportArgs(Options):
    """`draftset report DIR` / `draftset.api.report`."""

    dir: SetDir
    output: Annotated[
        PathLike | None,
        Cli(flags=("-o", "--output")),
        Field(description="HTML file to write (default: DIR/report.html)"),
    ] = None
    tokenizer: Annotated[
        PathLike | None,
        Field(description="tokenizer folder for the example rows (default: the manifest's)"),
    ] = None
    block_size: BlockSize = defaults.BLOCK_SIZE


class ShowArgs(Options):
    """`draftset show DIR --row N | --id ID` / `draftset.api.show`."""

    dir: SetDir
    row: Annotated[
        int | None,
        Cli(metavar="N", mutex="which"),  # the command parses it (`commands.show.row_index`)
        Field(
            description="the set's row N (0-based index in the set, -1 the last row;"
            " rejects.jsonl's `row` is another thing: a rejected row's index in its source)",
        ),
    ] = None
    row_id: Annotated[
        str | None,
        Cli(flags=("--id",), metavar="ID", mutex="which"),
        Field(description="the row with this id (e.g. pad-1)"),
    ] = None
    tokens: Annotated[
        bool, Cli(action="store_true"), Field(description="show token boundaries")
    ] = False
    tokenizer: ManifestTokenizer = None
    block_size: BlockSize = defaults.BLOCK_SIZE  # >= 2 as verify's and report's: B - 1 targets
