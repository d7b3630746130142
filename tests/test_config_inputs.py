"""Issue 24 item 5: no message is read by two streams (streamguard/ingest/inputs.py).

Two streams fed the same readings release them twice with independent draws (together they leak
more than either) and a mark reaches one of them, so ``config check`` and ``streamguard run``
refuse every way of configuring it (status 78, one line naming both streams). The topic-filter
overlap the refusal rests on is checked exhaustively against an independent matcher (a regular
expression per filter, written here) on every topic of a generated alphabet."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamguard.cli import main
from streamguard.config import ConfigError, load_settings
from streamguard.ingest.topics import filters_overlap, matches, valid_filter

# -- the filter overlap, against brute force ----------------------------------------------------

#: Filter levels: literals (one like a $ topic's first level, the empty level) and both wildcards.
FILTER_LEVELS = ("a", "b", "", "$s", "+", "#")
#: Topic levels: the filters' literals and one no filter names (what a wildcard level takes).
TOPIC_LEVELS = ("a", "b", "", "$s", "z")


def _oracle(topic_filter: str) -> re.Pattern[str]:
    """The topics ``topic_filter`` matches, as a regular expression (MQTT 3.1.1 §4.7: ``+`` one
    level, possibly empty; a last ``#`` the parent level and any below it; a filter starting with
    a wildcard matches no topic starting with ``$``)."""
    levels = topic_filter.split("/")
    hashed = levels[-1] == "#"
    pieces = ["[^/]*" if lv == "+" else re.escape(lv) for lv in (levels[:-1] if hashed else levels)]
    body = "/".join(pieces)
    if hashed:
        body = f"{body}(/.*)?" if pieces else ".*"
    guard = r"(?!\$)" if levels[0] in ("+", "#") else ""
    return re.compile(f"{guard}{body}", re.DOTALL)


def _filters(depth: int) -> list[str]:
    out = ["/".join(p) for n in range(1, depth + 1) for p in itertools.product(FILTER_LEVELS, repeat=n)]
    return [f for f in out if valid_filter(f)]


def _topics(depth: int) -> list[str]:
    out = ["/".join(p) for n in range(1, depth + 1) for p in itertools.product(TOPIC_LEVELS, repeat=n)]
    return [t for t in out if t]  # (a topic name is at least one character)


def test_filters_overlap_is_exactly_a_common_topic() -> None:
    """For every pair of filters of up to 3 levels: they overlap iff some topic of up to 4 levels
    matches both (enough: a witness needs no more levels than the longer filter, and a level a
    wildcard takes can be ``z``, which no filter names)."""
    filters, topics = _filters(3), _topics(4)
    regex = {f: _oracle(f) for f in filters}
    sets = {f: sum(1 << i for i, t in enumerate(topics) if regex[f].fullmatch(t)) for f in filters}
    assert len(filters) > 150 and len(topics) > 700
    wrong = [(a, b) for a, b in itertools.combinations_with_replacement(filters, 2)
             if filters_overlap(a, b) != bool(sets[a] & sets[b]) or filters_overlap(b, a) != filters_overlap(a, b)]
    assert not wrong, wrong[:10]
    # the cases the old overlap got wrong: a wildcard first level never meets a $ topic
    assert not filters_overlap("#", "$s/#") and not filters_overlap("+/a", "$s/a") and filters_overlap("$s/+", "$s/#")


def test_matches_agrees_with_the_oracle() -> None:
    topics = _topics(4)
    for f in _filters(3):
        r = _oracle(f)
        assert [matches(f, t) for t in topics] == [bool(r.fullmatch(t)) for t in topics], f


# -- configurations -------------------------------------------------------------------------

HEAD = '[[streams]]\nname = "{name}"\nlabels = ["off", "on"]\nepsilon = 1.0\n{extra}' \
       '[streams.model]\nalpha = 0.1\nbeta = 0.2\n'
ON_OFF = 'values = { true = "on", false = "off" }\n'


def _raw(name: str, topic: str | None = None) -> str:
    return HEAD.format(name=name, extra="" if topic is None else f'raw_topic = "{topic}"\n')


def _mapped(name: str, ingest: str) -> str:
    return HEAD.format(name=name, extra="sample_period = 1.0\n") + f"[streams.ingest]\nretained = true\n{ingest}"


def _z2m(name: str, device: str, field: str = "occupancy", extra: str = "") -> str:
    return _mapped(name, f'preset = "zigbee2mqtt"\ndevice = "{device}"\nfield = "{field}"\n{ON_OFF}{extra}')


def _rtl(name: str, sensor_id: int, host: str | None = None) -> str:
    dev = "" if host is None else f'device = "{host}"\n'
    return _mapped(name, f'preset = "rtl_433"\n{dev}field = "state"\nmatch = {{ model = "Door", id = {sensor_id} }}\n'
                         + ON_OFF)


def _shelly(name: str, component: str) -> str:
    return _mapped(name, f'preset = "shelly"\ndevice = "sh1"\ncomponent = "{component}"\nfield = "state"\n{ON_OFF}')


BUTTON = '[streams.ingest.button]\npreset = "zigbee2mqtt"\ndevice = "privacy_button"\nfield = "action"\n' \
         'press = ["single"]\n'

#: (what, stream tables) — each reads one input twice.
SHARED = [
    ("identical raw_topic", [_raw("a", "sensors/door"), _raw("b", "sensors/door")]),
    ("a default raw topic written as another's raw_topic", [_raw("a"), _raw("b", "streamguard/device-1/a/raw")]),
    ("one zigbee2mqtt sensor under two names", [_z2m("a", "hall"), _z2m("b", "hall")]),
    ("a preset and an explicit topic of one device",
     [_z2m("a", "hall"), _mapped("b", f'topic = "zigbee2mqtt/hall"\nfield = "occupancy"\n{ON_OFF}')]),
    ("a wildcard filter over a preset's device topic",
     [_z2m("a", "hall"), _mapped("b", f'topic = "zigbee2mqtt/+"\nfield = "occupancy"\n{ON_OFF}')]),
    ("two wildcard filters that meet",
     [_mapped("a", f'topic = "home/+/door"\nfield = "state"\n{ON_OFF}'),
      _mapped("b", f'topic = "home/hall/#"\nfield = "state"\n{ON_OFF}')]),
    ("a raw topic that is a mapped sensor's topic", [_z2m("a", "hall"), _raw("b", "zigbee2mqtt/hall")]),
    ("one rtl_433 sensor under two names, on every host and on one", [_rtl("a", 7), _rtl("b", 7, host="pi")]),
    ("one Shelly component under two names", [_shelly("a", "input:0"), _shelly("b", "input:0")]),
]


def _config(tmp_path: Path, streams: list[str]) -> Path:
    conf = tmp_path / "c.toml"
    conf.write_text("\n".join(streams))
    return conf


@pytest.mark.parametrize("what, streams", SHARED, ids=[w for w, _ in SHARED])
def test_two_streams_on_one_input_are_refused(tmp_path: Path, what: str, streams: list[str]) -> None:
    with pytest.raises(ConfigError) as exc:
        load_settings(_config(tmp_path, streams))
    line = str(exc.value)
    assert "\n" not in line and "streams.a and streams.b read the same input" in line, line


def test_a_raw_topic_on_a_command_topic_is_refused(tmp_path: Path) -> None:
    """Commands carry marks: a raw topic that is a command topic (another stream's or its own)
    would take marks for readings, or readings for marks."""
    for streams, culprit in (([_raw("a"), _raw("b", "streamguard/device-1/a/cmd")], "b"),
                             ([_raw("a", "streamguard/device-1/a/cmd")], "a")):
        with pytest.raises(ConfigError, match=rf"streams\.{culprit}: input topic \S+ can be the command topic "
                                              r"streamguard/device-1/a/cmd of streams\.a"):
            load_settings(_config(tmp_path, streams))


#: (what, stream tables) — different inputs, or inputs that may be shared.
DISTINCT = [
    ("two fields of one zigbee2mqtt device", [_z2m("a", "hall"), _z2m("b", "hall", field="contact")]),
    ("two rtl_433 sensors on one topic, told apart by match", [_rtl("a", 7), _rtl("b", 8)]),
    ("two components of one Shelly (a shared events/rpc topic)", [_shelly("a", "input:0"), _shelly("b", "input:1")]),
    ("one privacy button on two sensors (a press marks both)",
     [_z2m("a", "hall", extra=BUTTON), _z2m("b", "kitchen", extra=BUTTON)]),
    ("wildcard filters that cannot meet",
     [_mapped("a", f'topic = "home/+/door"\nfield = "state"\n{ON_OFF}'),
      _mapped("b", f'topic = "home/+/window/#"\nfield = "state"\n{ON_OFF}')]),
    ("raw topics one level apart", [_raw("a", "sensors/door"), _raw("b", "sensors/door/2")]),
]


@pytest.mark.parametrize("what, streams", DISTINCT, ids=[w for w, _ in DISTINCT])
def test_distinct_inputs_are_accepted(tmp_path: Path, what: str, streams: list[str]) -> None:
    assert [s.name for s in load_settings(_config(tmp_path, streams)).streams] == ["a", "b"]


@pytest.mark.parametrize("topic", ["sensors/+", "sensors/#", "#"])
def test_a_raw_topic_is_one_topic(tmp_path: Path, topic: str) -> None:
    """Frames are routed by their exact topic: a filter as ``raw_topic`` was subscribed to and
    never read (a stream that silently received nothing)."""
    with pytest.raises(ConfigError, match=r"raw_topic is one topic name \(no \+ or #\)"):
        load_settings(_config(tmp_path, [_raw("a", topic)]))


def test_two_stdin_streams_are_refused(tmp_path: Path) -> None:
    streams = [HEAD.format(name=n, extra='source = "stdin"\n') for n in ("a", "b")]
    with pytest.raises(ConfigError, match="at most one stream can read standard input"):
        load_settings(_config(tmp_path, streams))


def test_config_check_and_run_exit_78_naming_both_streams(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = _config(tmp_path, [_z2m("kitchen", "hall"), _z2m("hall", "hall")])
    assert main(["config", "check", str(conf)]) == 78
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "streams.kitchen and streams.hall read the same input" in err[0], err
    proc = subprocess.run([sys.executable, "-m", "streamguard.cli", "run", "--config", str(conf)],
                          capture_output=True, timeout=60)
    lines = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 78 and len(lines) == 1, lines
    assert "streams.kitchen and streams.hall read the same input (topic zigbee2mqtt/hall / zigbee2mqtt/hall)" \
        in lines[0]


def test_a_gateway_of_streams_is_checked_quickly() -> None:
    """Literal topics are grouped and a wildcard filter meets only its first level's filters, so
    a gateway's thousand sensors, thousand raw streams and hundred rtl_433 sensors on one
    wildcard filter cost look-ups, not millions of comparisons (the check runs at every start)."""
    import time
    from types import SimpleNamespace

    from streamguard.ingest.inputs import shared_input, stream_inputs
    from streamguard.ingest.spec import IngestConfig

    def stream(name: str, ingest: IngestConfig | None) -> SimpleNamespace:
        return SimpleNamespace(name=name, source="mqtt", raw_topic=None, ingest=ingest)

    streams = [stream(f"z{i}", IngestConfig(preset="zigbee2mqtt", device=f"d{i}", field="occupancy"))
               for i in range(1000)]
    streams += [stream(f"r{i}", None) for i in range(1000)]
    streams += [stream(f"t{i}", IngestConfig(preset="rtl_433", field="state", match={"id": i})) for i in range(100)]
    inputs = stream_inputs(streams, lambda *parts: "/".join(("streamguard", "device-1", *parts)))
    t0 = time.perf_counter()
    assert shared_input(inputs) is None
    assert time.perf_counter() - t0 < 1.0  # (0.06 s here; comparing every pair took 3 s)
    twin = stream("t100", IngestConfig(preset="rtl_433", device="pi", field="state", match={"id": 99}))
    assert shared_input(inputs + stream_inputs([twin], lambda *parts: "/".join(parts))) is not None


def test_refusals_are_exactly_the_readings_two_streams_would_share() -> None:
    """Against the daemon's own reading of messages (ingest/mapping.Extractor): for every pair of
    mapped sensors over a family of topic filters, fields and rtl_433-style ``match`` rules, the
    pair is refused iff some message gives both streams a reading that follows one and the same
    value of the message (flipping that value flips both readings) — over topics of up to three
    levels and payloads carrying every field. Refused configurations share readings; no accepted
    one does (two fields of one message are two readings)."""
    from types import SimpleNamespace

    from streamguard.ingest.inputs import shared_input, stream_inputs
    from streamguard.ingest.mapping import Extractor, Reading
    from streamguard.ingest.presets import resolve
    from streamguard.ingest.spec import IngestConfig
    from streamguard.frames.records import StateMap

    filters = [f for f in ("/".join(p) for n in (1, 2) for p in itertools.product(("a", "b", "+", "#"), repeat=n))
               if valid_filter(f)]
    specs = [IngestConfig(topic=f, field=field, match=match, values={"true": "on", "false": "off"})
             for f in filters for field in ("x", "y", "p.x") for match in ({}, {"id": 1}, {"id": 2})]
    body = {"x": True, "y": False, "p": {"x": True}}
    flips = [{"x": False}, {"y": True}, {"p": {"x": False}}]  # one value of the message each
    messages = [(t, extra) for t in _topics_over(("a", "b", "c"), 3) for extra in ({"id": 1}, {"id": 2}, {})]
    states = StateMap(labels=("off", "on"))

    def follows(spec: IngestConfig) -> int:
        """Bit (message, value): the stream's reading of the message follows that value."""
        ex = Extractor(resolve(spec), states)
        bits = 0
        for i, (topic, extra) in enumerate(messages):
            base = ex.reading(topic, json.dumps({**body, **extra}).encode(), recv=0.0)
            for j, flip in enumerate(flips):
                other = ex.reading(topic, json.dumps({**body, **extra, **flip}).encode(), recv=0.0)
                if isinstance(base, Reading) and isinstance(other, Reading) and base.value != other.value:
                    bits |= 1 << (len(flips) * i + j)
        return bits

    masks = [follows(s) for s in specs]
    inputs = [[x for x in stream_inputs([SimpleNamespace(name=f"s{i}", source="mqtt", ingest=s, raw_topic=None)],
                                        lambda *parts: "/".join(("sg", "dev", *parts)))
               if x.kind != "command"] for i, s in enumerate(specs)]
    assert all(masks)  # every spec reads something
    wrong = [(specs[i].topic, specs[i].field, specs[i].match, specs[j].topic, specs[j].field, specs[j].match)
             for i, j in itertools.combinations(range(len(specs)), 2)
             if (shared_input(inputs[i] + inputs[j]) is not None) != bool(masks[i] & masks[j])]
    assert len(specs) > 100 and not wrong, wrong[:5]


def _topics_over(levels: tuple[str, ...], depth: int) -> list[str]:
    return ["/".join(p) for n in range(1, depth + 1) for p in itertools.product(levels, repeat=n)]


def test_a_shared_privacy_button_marks_every_stream_it_is_on(tmp_path: Path) -> None:
    """The decision for shared buttons: allowed, and one press reaches every stream that has the
    button (ingest/stream.IngestHub.presses, what the daemon's buttons session acts on)."""
    from streamguard.ingest.stream import IngestHub

    settings = load_settings(_config(tmp_path, [_z2m("a", "hall", extra=BUTTON), _z2m("b", "kitchen", extra=BUTTON),
                                                _z2m("c", "bedroom")]))
    hub = IngestHub(settings)
    try:
        presses = hub.presses("zigbee2mqtt/privacy_button", b'{"action":"single"}', retain=False, now=1.0)
    finally:
        hub.close()
    assert sorted(name for name, _ in presses) == ["a", "b"]
