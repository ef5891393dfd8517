"""State files read back through one typed reader: every value is the type the code
reads it as, or the file is refused with the file and the place named. Held on the
reader itself, on a wheel's provenance (a refusal: BuildError) and on the status cache
(a cache: a damaged answer is computed again), each with sealed files whose values are
wrong in one place at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpatch.errors import BuildError, StateError
from forkpatch.fsutil import dump_state, load_state
from forkpatch.kinds import BUILDER_MODES
from forkpatch.typedreader import TEXT_LIMIT, TypedReader
from forkpatch.wheels.identity import BuilderInfo, PatchRecord, Provenance
from support.cli import Runner
from support.projects import copy_example
from support.reliability import Row

R = TypedReader("state.json")
OID = "0123456789abcdef" * 2 + "01234567"


@pytest.mark.parametrize(
    ("read", "where"),
    [
        (lambda: R.mapping([1], "top"), "state.json: top: expected an object, got list"),
        (lambda: R.mapping({1: 2}, "top"), "state.json: top: expected an object, got dict"),
        (lambda: R.mapping({"a": 1, "z": 2}, "", keys=("a",)), "state.json: unknown key(s) z"),
        (lambda: R.mapping({}, "x", required=("b", "a")), "state.json: x: missing key(s) a, b"),
        (lambda: R.text({}, "name", "p"), "state.json: p: 'name' is missing"),
        (
            lambda: R.text({"name": 3}, "name", "p"),
            "state.json: p: 'name' must be a string, found 3",
        ),
        (lambda: R.text({"n": "a\0b"}, "n", "p"), "state.json: p: 'n' is not a plain value"),
        (lambda: R.text({"n": "x" * (TEXT_LIMIT + 1)}, "n", "p"), "'n' is not a plain value"),
        (
            lambda: R.number({"n": True}, "n", "p"),
            "state.json: p: 'n' must be a whole number, found True",
        ),
        (lambda: R.number({"n": 1.5}, "n", "p"), "'n' must be a whole number, found 1.5"),
        (lambda: R.oid({"c": "abc"}, "c", "base"), "state.json: base: 'c' is not a commit id"),
        (lambda: R.oid({"c": OID.upper()}, "c", ""), "state.json: 'c' is not a commit id"),
        (lambda: R.maybe_sha256({"s": "0" * 63}, "s", ""), "'s' must be a sha256 hex digest"),
        (lambda: R.strings({"f": ["a", 2]}, "f", "p"), "state.json: p.f[1]: expected a string"),
        (lambda: R.numbers({"h": [1, False]}, "h", "c"), "state.json: c.h[1]: expected a number"),
        (lambda: R.items({"l": "ab"}, "l", ""), "'l' must be a list, found 'ab'"),
        (
            lambda: R.word({"mode": "docker"}, "mode", BUILDER_MODES, "builder"),
            "state.json: builder: 'mode' is 'docker', not one of overlay, container",
        ),
        (lambda: R.text_map({"a": {"k": 1}}, "a", "b"), "state.json: b.a: 'k' must be a string"),
        (lambda: R.strings({"f": ["abcd"]}, "f", "p", limit=3), "state.json: p.f[0]: expected a"),
        (lambda: R.relpath("../up", "files[0]"), "state.json: files[0]: '../up' is not a plain"),
        (lambda: R.relpath("/abs", "files[1]"), "state.json: files[1]: '/abs' is not a plain"),
        (lambda: R.relpath(3, "moved"), "state.json: moved: expected a relative path, found 3"),
        (lambda: R.relpath("", "moved"), "state.json: moved: expected a relative path"),
    ],
)
def test_each_refusal_names_the_file_and_the_place(read, where):
    with pytest.raises(StateError) as err:
        read()
    assert where in err.value.message


def test_good_values_come_back_typed():
    data = {"n": "p1", "c": OID, "s": None, "f": ["a", "b"], "h": [1, 2], "m": "container"}
    assert R.text(data, "n", "") == "p1" and R.oid(data, "c", "") == OID
    assert R.maybe_sha256(data, "s", "") is None and R.maybe_text(data, "absent", "") is None
    assert R.strings(data, "f", "") == ("a", "b") and R.numbers(data, "h", "") == (1, 2)
    assert R.strings(data, "absent", "", optional=True) == ()
    assert R.strings({"f": ["x" * (TEXT_LIMIT + 1)]}, "f", "", limit=TEXT_LIMIT + 1)
    assert R.relpath("vllm/a b.py", "files[0]") == "vllm/a b.py"
    assert R.word(data, "m", BUILDER_MODES, "") == "container"
    assert R.maybe_number({"line": None}, "line", "") is None
    assert R.text_map({}, "args", "") == {} and R.text_map({"a": {"k": "v"}}, "a", "") == {"k": "v"}


def test_the_caller_s_error_class_and_tip_are_raised():
    reader = TypedReader("w.whl: provenance", error=BuildError, tip="build it again")
    with pytest.raises(BuildError) as err:
        reader.text({}, "tag", "")
    assert err.value.message == "w.whl: provenance: 'tag' is missing"
    assert err.value.tip == "build it again"


# ------------------------------------------------------------------ a wheel's provenance

GOOD = Provenance(
    fork_url="https://example.com/fork.git",
    tag="v1.2.1",
    commit=OID,
    patches=(PatchRecord("a", sha256="a" * 64), PatchRecord("b", build_step="vllm-dist-info")),
    forkpatch_version="0.1.0",
    builder=BuilderInfo("container", image_id="sha256:" + "1" * 64, build_args={"K": "v"}),
    files={"vllm/x.py": "c" * 64, "vllm/gone.py": None},
    members_sha256="d" * 64,
)


def _with(change) -> str:  # type: ignore[no-untyped-def]
    d = json.loads(GOOD.to_json())
    change(d)
    return json.dumps(d)


def test_provenance_round_trips():
    assert Provenance.from_json(GOOD.to_json()) == GOOD


PROVENANCE_DAMAGE = [
    (lambda d: d.update(surprise=1), "prov: unknown key(s) surprise"),
    (lambda d: d.pop("tag"), "prov: missing key(s) tag"),
    (lambda d: d.update(tag=121), "prov: 'tag' must be a string, found 121"),
    (lambda d: d.update(commit="v1.2.1"), "prov: 'commit' is not a commit id"),
    (lambda d: d.update(patches={}), "prov: 'patches' must be a list"),
    (lambda d: d["patches"].append("c"), "prov: patches[2]: expected an object, got str"),
    (lambda d: d["patches"][0].update(sha256="xyz"), "prov: patches[0]: 'sha256' must be a"),
    (lambda d: d["patches"][1].pop("build_step"), "prov: patches[1]: provenance entry 'b'"),
    (lambda d: d["patches"][0].pop("name"), "prov: patches[0]: missing key(s) name"),
    (lambda d: d["builder"].update(mode="docker"), "prov: builder: 'mode' is 'docker'"),
    (lambda d: d["builder"].update(build_args=[]), "prov: builder.build_args: expected an"),
    (lambda d: d["builder"]["build_args"].update(K=7), "builder.build_args: 'K' must be a string"),
    (lambda d: d["files"].update({"vllm/y.py": 1}), "prov: files: 'vllm/y.py' must be a string"),
    (lambda d: d.update(members_sha256="short"), "prov: 'members_sha256' must be a sha256"),
]


@pytest.mark.parametrize(("change", "said"), PROVENANCE_DAMAGE)
def test_provenance_wrong_in_one_place_is_refused_naming_it(change, said):
    with pytest.raises(BuildError) as err:
        Provenance.from_json(_with(change), source="prov")
    assert said in err.value.message, err.value.message


@pytest.mark.parametrize("absent", ["files", "members_sha256"])
def test_provenance_from_before_a_field_was_recorded_reads(absent):
    got = Provenance.from_json(_with(lambda d: d.pop(absent)))
    assert getattr(got, absent) is None


# ------------------------------------------------------------------------ the status cache


@pytest.fixture
def example(tmp_path: Path, capsys):  # type: ignore[no-untyped-def]
    ex = copy_example(tmp_path, capsys)
    ex.run("status")  # computes the answer and keeps it
    return ex


def _status(run: Runner) -> dict[str, str]:
    _, out, _ = run("status", "--json")
    return {p["name"]: p["status"] for p in json.loads(out)["patches"]}


CACHE_DAMAGE = {
    "status": lambda r: r.update(status="perfect"),
    "added text": lambda r: r.update(added="3"),
    "added bool": lambda r: r.update(added=True),
    "files": lambda r: r.update(files=["a", None]),
    "hunks": lambda r: r.update(
        conflicts=[{"path": "a", "reason": "x", "hunks": ["1"], "line": 1}]
    ),
    "line": lambda r: r.update(conflicts=[{"path": "a", "reason": "x", "hunks": [1], "line": "9"}]),
    "no name": lambda r: r.pop("name"),
}


@pytest.mark.parametrize("damage", CACHE_DAMAGE.values(), ids=CACHE_DAMAGE.keys())
def test_a_status_cache_sealed_with_a_wrong_value_is_computed_again(example, damage):
    cache = example.project / ".forkpatch" / "status-cache.json"
    want = _status(example.run)
    data = load_state(cache, kind="status-cache", version=1)
    assert data is not None and isinstance(data["results"], list)
    damage(data["results"][0])
    cache.write_bytes(dump_state("status-cache", 1, data))
    assert _status(example.run) == want
    kept = load_state(cache, kind="status-cache", version=1)
    assert kept is not None and kept["results"] != data["results"]  # kept anew, right


RELIABILITY = [
    Row(
        "wheel integrity",
        "a wheel's provenance wrong in one place: an unknown or missing key, a value of "
        "another type, a commit id or sha256 that is not one, a builder mode outside its set",
        f"{len(PROVENANCE_DAMAGE)} cases",
        "refused naming the wheel's provenance and the place in it (BuildError); never read "
        "as the wheel's identity",
        refused=str(len(PROVENANCE_DAMAGE)),
    ),
    Row(
        "changed outside forkpatch",
        "the status cache sealed again with a wrong value (a status outside its set, a count "
        "that is text or a boolean, a stray type in a list, a missing name)",
        f"{len(CACHE_DAMAGE)} cases",
        "not trusted: the status is computed again, right, and kept anew",
    ),
]
