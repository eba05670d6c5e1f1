"""Trial data (``datasets list|show --data``, ``datasets repair``): store lines with one field
replaced, garbage lines, and parquet files with wrong, missing or nasty columns, and corrupt
bytes."""

from __future__ import annotations

import json
from functools import lru_cache

from hypothesis import given
from hypothesis import strategies as st

from fuzz_harness import NASTY_STRINGS, check, files, fuzz, nasty_values, run_cli, workdir

DOMAIN = "bert-3l-A"


@lru_cache(maxsize=1)
def _records() -> list[dict]:
    from autosync_transfer.domains.catalog import get_domain
    from autosync_transfer.testing.synthetic import synthetic_records

    recs = synthetic_records(get_domain(DOMAIN), n=4, seed=0)
    return [json.loads(r.model_dump_json()) for r in recs]


def _run_on(d, data: str, surface: str, repair: bool = False) -> None:  # noqa: ANN001
    before = files(d)
    check(run_cli("datasets", "list", "--data", data), surface, written=files(d) - before)
    check(run_cli("datasets", "show", DOMAIN, "--data", data, "--top", "3"), surface,
          written=files(d) - before)
    if repair:  # rewrites the store on success (STORE.bad.jsonl beside it)
        check(run_cli("datasets", "repair", data), surface)


@fuzz(60)
@given(st.data(), nasty_values(), st.booleans())
def test_store_line_field_replaced(data: st.DataObject, value: object, repair: bool) -> None:
    recs = [dict(r) for r in _records()]
    i = data.draw(st.integers(0, len(recs) - 1))
    field = data.draw(st.sampled_from(sorted(recs[i])))
    recs[i][field] = value
    with workdir() as d:
        store = d / "s.jsonl"
        store.write_text("".join(json.dumps(r, default=str) + "\n" for r in recs))
        _run_on(d, str(store), "trial-store lines", repair=repair)


@fuzz(40)
@given(st.lists(st.one_of(st.text(max_size=80), st.sampled_from(
    ["{", "[]", "null", '{"id": 1}', '{"id": "x"}', '{"id": "x", "domain": "[/]"}',
     "[" * 5000, '{"id": "x", "seed": 1' + "0" * 5000 + "}", "\x00", '{"id": NaN}']),
    st.sampled_from(NASTY_STRINGS)), max_size=5), st.booleans())
def test_store_garbage_lines(lines: list[str], repair: bool) -> None:
    good = [json.dumps(r) for r in _records()[:2]]
    with workdir() as d:
        store = d / "s.jsonl"
        store.write_text("\n".join(good + lines) + "\n", encoding="utf-8",
                         errors="surrogatepass")
        _run_on(d, str(store), "trial-store lines", repair=repair)


@fuzz(40)
@given(st.data(), nasty_values())
def test_parquet_column_replaced(data: st.DataObject, value: object) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    recs = [dict(r) for r in _records()]
    fld = data.draw(st.sampled_from(sorted(recs[0])))
    how = data.draw(st.sampled_from(["value", "drop", "rename"]))
    for r in recs:
        if how == "value":
            r[fld] = value
        elif how == "drop":
            r.pop(fld)
        else:
            r[fld + "_x"] = r.pop(fld)
    cols = {k: [r.get(k) for r in recs] for k in recs[0]}
    try:
        table = pa.table({k: (v if not any(isinstance(x, (dict, list)) and not x for x in v)
                              else [json.dumps(x) for x in v]) for k, v in cols.items()})
    except (pa.ArrowException, TypeError, ValueError, OverflowError):  # not storable as parquet
        table = pa.table({k: [json.dumps(x, default=str) for x in v] for k, v in cols.items()})
    with workdir() as d:
        path = d / "t.parquet"
        pq.write_table(table, path)
        _run_on(d, str(path), "parquet files")


@fuzz(30)
@given(st.data(), st.sampled_from(["flip", "cut", "garbage"]))
def test_parquet_corrupt_bytes(data: st.DataObject, how: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    with workdir() as d:
        path = d / "t.parquet"
        recs = _records()
        pq.write_table(pa.Table.from_pylist([{k: json.dumps(v) if isinstance(v, (dict, list))
                                              else v for k, v in r.items()} for r in recs]), path)
        buf = bytearray(path.read_bytes())
        i = data.draw(st.integers(0, len(buf) - 1))
        if how == "flip":
            buf[i] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del buf[i:]
        else:
            buf = bytearray(data.draw(st.binary(max_size=200)))
        path.write_bytes(bytes(buf))
        _run_on(d, str(path), "parquet files")


@fuzz(10)
@given(st.sampled_from(["/dev/zero", "/", "/nonexistent", "", "[/]", "-"]))
def test_special_paths(path: str) -> None:
    with workdir() as d:
        _run_on(d, path, "trial-store lines")
