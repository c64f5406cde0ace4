"""Templates written to reach each branch of vLLM's content-format walk, with the format vLLM
0.33 gives each (tests/checks/test_render_server.py checks these against vLLM itself;
tests/mask/test_content_format.py against draftset's `mask.content_format`)."""

from __future__ import annotations

EDGE_TEMPLATES: dict[str, tuple[str, str]] = {
    "edge_plain_loop": (
        "{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}",
        "openai",
    ),
    "edge_filtered": (
        "{% for m in messages %}{% for p in m.content | default([]) %}x{% endfor %}{% endfor %}",
        "openai",
    ),
    "edge_alias": (
        "{% set msgs = messages[1:] %}{% for m in msgs %}{% for p in m.content %}x{% endfor %}"
        "{% endfor %}",
        "openai",
    ),
    "edge_namespace": (
        "{% set ns = namespace(rest=messages) %}{% for m in ns.rest %}"
        "{% for p in m.content %}x{% endfor %}{% endfor %}",
        "openai",
    ),
    "edge_macro": (
        "{% macro show(c) %}{% for p in c %}{{ p.text }}{% endfor %}{% endmacro %}"
        "{% for m in messages %}{{ show(m.content) }}{% endfor %}",
        "openai",
    ),
    "edge_content_name": (
        "{% for m in messages %}{% set content = m.content %}{% for p in content %}x{% endfor %}"
        "{% endfor %}",
        "openai",
    ),
    "edge_string_only": ("{% for m in messages %}{{ m.content }}{% endfor %}", "string"),
    # a loop over messages with a tuple target stops vLLM's walk (it asserts, then falls back),
    # though a content loop follows
    "edge_tuple_target": (
        "{% for a, b in messages %}{% endfor %}"
        "{% for m in messages %}{% for p in m.content %}x{% endfor %}{% endfor %}",
        "string",
    ),
    "edge_does_not_parse": ("{% for m in messages %}", "string"),
}
