"""`verify --tokenizer` of another model is an unusable argument, as it is for `show` and
`report`: one line, exit 2, before any check, the set's verify.json left as it was. It ran,
failed `tokenizer` ("--eot-token '<|im_end|>' is not a token of this tokenizer"), exit 1, and
recorded that FAIL over the passing verify.json, so `report` then showed the set as FAILED."""

from __future__ import annotations

from conftest import built_set, llama32_tokenizer_dir, qwen3_tokenizer_dir

from draftset.cli import main


def test_verify_with_another_models_tokenizer_is_exit_2_and_keeps_the_record(tmp_path, capsys):
    row = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    out = built_set(tmp_path, [row], "o")
    assert main(["verify", str(out), "--fast"]) == 0
    assert main(["verify", str(out)]) == 0
    record = (out / "verify.json").read_bytes()
    capsys.readouterr()
    llama = llama32_tokenizer_dir()
    assert main(["verify", str(out), "--tokenizer", str(llama)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"draftset: error: --tokenizer {llama} is not the tokenizer this set")
    assert "128,25" in err[0] and "151,6" in err[0]
    assert (out / "verify.json").read_bytes() == record
    assert main(["verify", str(out), "--tokenizer", str(qwen3_tokenizer_dir())]) == 0
