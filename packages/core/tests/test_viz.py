"""`agent-saga animate` and `agent-saga viz`: well-formed SVG that says what the log says."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from cli_support import Ran, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_profiles import examples
from viz_logs import DEMO_TOOLS, write_mixed_log

from agent_saga import FileWAL
from agent_saga.log import read_records
from agent_saga.ui import (
    THEMES,
    GraphSaga,
    GraphStep,
    reconstruct,
    render_animation,
    render_fleet,
    render_outcomes,
    to_mermaid,
)
from agent_saga.ui._outcomes import MIN_OBSERVATIONS

SVG = "{http://www.w3.org/2000/svg}"


def cli(*args: str) -> Ran:
    return run_cli(*args)  # in process (cli_support.py); test_cli.py runs the real one


def parse(text: str) -> ET.Element:
    root = ET.fromstring(text)  # raises on anything that is not well-formed XML
    assert root.tag == f"{SVG}svg"
    return root


def all_text(root: ET.Element) -> str:
    return " ".join("".join(el.itertext()) for el in root.iter() if el.tag in (f"{SVG}text", f"{SVG}title",
                                                                               f"{SVG}desc"))


def groups(root: ET.Element, **attrs: str) -> list[ET.Element]:
    return [g for g in root.iter(f"{SVG}g") if all(g.get(k.replace("_", "-")) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_mixed_log(tmp_path_factory.mktemp("viz") / "mixed.wal")


def by_name(path: Path) -> dict[str, GraphSaga]:
    return {s.name: s for s in reconstruct(read_records(path))}


# -- on the demo's own log ------------------------------------------------------------------


@pytest.mark.slow
def test_every_picture_of_the_demo_log_is_well_formed_and_names_its_steps(demo_log: Path, tmp_path: Path) -> None:
    pictures = {}
    for kind in ("fleet", "chain", "outcomes"):
        out = cli("viz", "--wal", str(demo_log), "--kind", kind, "-o", str(tmp_path / f"{kind}.svg"))
        assert out.returncode == 0, out.stderr
        pictures[kind] = parse((tmp_path / f"{kind}.svg").read_text())
    sagas = by_name(demo_log)
    for name, saga in sagas.items():
        out = cli("animate", "--wal", str(demo_log), "--saga", saga.saga_id[:12], "-o", str(tmp_path / f"{name}.svg"))
        assert out.returncode == 0, out.stderr
        root = pictures[name] = parse((tmp_path / f"{name}.svg").read_text())
        assert root.get("data-saga") == saga.saga_id
        for step in saga.steps:
            assert f"{step.index}. {step.tool}" in all_text(root)
    everything = {kind: all_text(root) for kind, root in pictures.items()}
    for tool in DEMO_TOOLS:
        for kind in ("fleet", "chain", "outcomes"):
            assert tool in everything[kind], (tool, kind)
    # Act I, drawn: three undos newest first and a clean verdict, with the handler that ran
    act1 = pictures["onboard-acme"]
    assert [g.get("data-step") for g in sorted(groups(act1, data_outcome="compensated"),
                                               key=lambda g: int(g.get("data-order", 0)))] == ["3", "2", "1"]
    assert act1.get("data-verdict") == "clean" and "rollback clean" in everything["onboard-acme"]
    assert "demo.undo(target='ticket ONB-7')" in everything["onboard-acme"]
    assert "4. aws.configure_region" in everything["onboard-acme"] and "not-applied" in everything["onboard-acme"]


@pytest.mark.slow
def test_animate_without_saga_draws_the_first_unwind_act_one_as_the_readme_shows(demo_log: Path) -> None:
    """The README's picture is Act I; the demo's log also holds Acts II and III, unwound later."""
    out = cli("animate", "--wal", str(demo_log))
    assert out.returncode == 0
    act1 = by_name(demo_log)["onboard-acme"]
    assert parse(out.stdout).get("data-saga") == act1.saga_id
    assert "demo.undo(target='ticket ONB-7')" in all_text(parse(out.stdout))
    assert act1.saga_id in out.stderr and "(onboard-acme)" in out.stderr and "--saga" in out.stderr


@pytest.mark.slow
def test_one_changed_digit_draws_broken_and_the_original_does_not(demo_log: Path, tmp_path: Path) -> None:
    original = cli("viz", "--wal", str(demo_log), "--kind", "chain")
    assert original.returncode == 0, original.stderr
    root = parse(original.stdout)
    assert "BROKEN" not in original.stdout and root.get("data-broken") == "0"
    assert "chain: intact" in all_text(root)

    lines = demo_log.read_bytes().split(b"\n")
    # one digit of the amount Act II's runaway agent charged, in the body of the 24th record
    assert b'"amount":999' in lines[22]
    lines[22] = lines[22].replace(b'"amount":999', b'"amount":998', 1)
    tampered = tmp_path / "tampered.wal"
    tampered.write_bytes(b"\n".join(lines))
    out = cli("viz", "--wal", str(tampered), "--kind", "chain", "-o", str(tmp_path / "chain.svg"))
    assert out.returncode == 1 and "BROKEN at seq 23" in out.stderr
    root = parse((tmp_path / "chain.svg").read_text())
    bad = groups(root, data_link="broken")
    assert [g.get("data-line") for g in bad] == ["23"]
    assert "BROKEN" in all_text(bad[0]) and "digest" in all_text(bad[0])
    assert "BROKEN at seq 23" in all_text(root)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_changed_digit_anywhere_is_drawn_broken(demo_log: Path, data: st.DataObject) -> None:
    from agent_saga.ui import render_chain_bytes

    raw = demo_log.read_bytes()
    digits = [m.start() for m in re.finditer(rb"[0-9]", raw)]
    at = data.draw(st.sampled_from(digits))
    new = data.draw(st.sampled_from([d for d in b"0123456789" if d != raw[at]]))
    root = parse(render_chain_bytes(raw[:at] + bytes([new]) + raw[at + 1:]))
    assert int(root.get("data-broken", "0")) >= 1 and "BROKEN" in all_text(root)


def test_a_cropped_chain_keeps_every_break(tmp_path: Path) -> None:
    from agent_saga.ui import render_chain_bytes
    from agent_saga.ui._chain_picture import MAX_ROWS

    path = tmp_path / "long.wal"
    wal = FileWAL(path)
    for n in range(400):
        wal.append("SAGA_STARTED", f"saga-{n}", {"name": f"n{n}"})
    wal.close()
    lines = path.read_bytes().split(b"\n")
    for index in (50, 200, 351):  # change a digit of the name in three bodies far apart
        lines[index] = lines[index].replace(f'"n{index}"'.encode(), f'"n{index + 1000}"'.encode())
    root = parse(render_chain_bytes(b"\n".join(lines)))
    assert sorted(int(g.get("data-line", 0)) for g in groups(root, data_link="broken")) == [51, 201, 352]
    drawn = [g for g in root.iter(f"{SVG}g") if g.get("data-link")]
    assert len(drawn) < MAX_ROWS
    elided = [t for t in root.iter(f"{SVG}text") if t.get("data-role") == "elided"]
    assert elided and all("none broken" in (t.text or "") for t in elided)
    hidden = sum(int(re.match(r"\.\.\. (\d+)", t.text or "").group(1)) for t in elided)  # type: ignore[union-attr]
    assert hidden + len(drawn) == 400


def test_unchained_and_partly_chained_logs_are_never_called_intact(tmp_path: Path) -> None:
    from agent_saga.ui import render_chain_bytes

    wal = FileWAL(tmp_path / "plain.wal", chain=False)
    wal.append("SAGA_STARTED", "s1", {"name": "x"})
    wal.close()
    plain = parse(render_chain_bytes((tmp_path / "plain.wal").read_bytes()))
    assert plain.get("data-status") == "unchained" and "UNCHAINED" in all_text(plain)
    assert "intact" not in all_text(plain)

    # A chain that starts later (an unchained writer first) is partly chained, never intact.
    later = FileWAL(tmp_path / "plain.wal")
    later.append("SAGA_COMPLETED", "s1", {})
    later.close()
    partial = parse(render_chain_bytes((tmp_path / "plain.wal").read_bytes()))
    assert partial.get("data-status") == "partial" and "PARTLY CHAINED" in all_text(partial)
    assert "intact" not in all_text(partial).replace("not intact", "")

    # A plain line after a chained one is a break (a forged record), never "partial".
    chained = FileWAL(tmp_path / "mixed.wal")
    chained.append("SAGA_STARTED", "s1", {"name": "x"})
    chained.close()
    with open(tmp_path / "mixed.wal", "ab") as fh:
        fh.write(b'{"saga":"s1","seq":2,"ts":1,"type":"SAGA_COMPLETED","body":{}}\n')
    forged = parse(render_chain_bytes((tmp_path / "mixed.wal").read_bytes()))
    assert forged.get("data-status") == "broken" and "BROKEN" in all_text(forged)


# -- animate --------------------------------------------------------------------------------


def keyframe_start(root: ET.Element, el: ET.Element) -> float:
    """When (in % of the cycle) ``el`` starts to appear, read from its own keyframes."""
    css = "".join(s.text or "" for s in root.iter(f"{SVG}style"))
    name = next(c for c in (el.get("class") or "").split() if re.fullmatch(r"k\d+", c))
    return float(re.search(rf"@keyframes {name}\{{0%,([\d.]+)%", css).group(1))  # type: ignore[union-attr]


def test_compensations_fire_newest_first_one_at_a_time(demo_log: Path) -> None:
    saga = by_name(demo_log)["runaway-agent"]
    root = parse(render_animation(saga))
    undos = groups(root, data_outcome="compensated")
    starts = {int(g.get("data-step", 0)): keyframe_start(root, g) for g in undos}
    assert sorted(starts, key=starts.__getitem__) == [5, 4, 3, 2, 1]
    assert len(set(starts.values())) == 5  # one at a time
    forward = [g for g in root.iter(f"{SVG}g") if g.get("data-step") and not g.get("data-outcome")]
    verdict = groups(root, data_role="verdict")[0]
    assert max(keyframe_start(root, g) for g in forward) < min(starts.values()) < keyframe_start(root, verdict)


def test_animation_is_self_contained_and_honours_reduced_motion(demo_log: Path) -> None:
    text = render_animation(by_name(demo_log)["onboard-acme"])
    root = parse(text)
    assert not list(root.iter(f"{SVG}script")) and "<script" not in text.lower()
    assert not re.search(r"\b(href|src)=|@import|url\((?!#)|https?://(?!www\.w3\.org/2000/svg)", text)
    assert not re.search(r"\son[a-z]+=", text)  # no event handlers
    assert "@media (prefers-reduced-motion: reduce){.a{animation:none!important}}" in text
    assert "infinite" in text and "1 forwards" not in text
    once = render_animation(by_name(demo_log)["onboard-acme"], loop=False)
    assert "1 forwards" in once and "infinite" not in once


def test_animation_is_deterministic_for_a_log(demo_log: Path) -> None:
    a = render_animation(by_name(demo_log)["onboard-acme"], THEMES["dark"])
    b = render_animation(by_name(demo_log)["onboard-acme"], THEMES["dark"])
    assert a == b
    assert parse(a).get("data-theme") == "dark" and THEMES["dark"].background in a
    assert THEMES["dark"].background not in render_animation(by_name(demo_log)["onboard-acme"])


def test_a_partial_rollback_is_never_drawn_clean(mixed: Path) -> None:
    sagas = by_name(mixed)
    root = parse(render_animation(sagas["partial"]))
    assert root.get("data-verdict") == "dirty"
    text = all_text(root)
    assert "rollback NOT CLEAN: 1 failed, 2 unresolved" in text
    assert "1 compensated" not in text and "0 compensated - 0 kept - 1 failed - 0 orphaned - 2 unresolved" in text
    outcomes = {g.get("data-step"): g.get("data-outcome") for g in root.iter(f"{SVG}g") if g.get("data-outcome")}
    assert outcomes == {"3": "failed", "2": "unresolved", "1": "unresolved"}
    assert "COMPENSATION FAILED - needs a human" in text and "UNRESOLVED - not undone" in text
    # the verdict banner wears the dirty look, never the clean one
    banner = groups(root, data_role="verdict")[0].find(f"{SVG}rect")
    assert banner is not None and banner.get("fill") == THEMES["light"].looks["dirty"].fill

    orphan = parse(render_animation(sagas["orphan"]))
    assert orphan.get("data-verdict") == "dirty" and "1 orphaned" in all_text(orphan)
    assert "ORPHANED - no undo exists" in all_text(orphan)


def test_outcomes_have_their_own_colour_and_border(mixed: Path) -> None:
    root = parse(render_animation(by_name(mixed)["partial"]))
    looks = {}
    for g in root.iter(f"{SVG}g"):
        if g.get("data-outcome"):
            rect = g.find(f"{SVG}rect")
            assert rect is not None
            looks[g.get("data-outcome")] = (rect.get("fill"), rect.get("stroke-width"), rect.get("stroke-dasharray"))
    assert looks["failed"] != looks["unresolved"] and looks["failed"][1] == "4"
    assert looks["unresolved"][2]  # dotted as well as grey


def test_animate_and_graph_agree_on_every_saga(mixed: Path, demo_log: Path) -> None:
    for log in (mixed, demo_log):
        sagas = reconstruct(read_records(log))
        mermaid = to_mermaid(sagas)
        for saga in sagas:
            root = parse(render_animation(saga))
            banner = all_text(groups(root, data_role="verdict")[0])
            assert saga.verdict in banner and saga.verdict in mermaid.replace("#quot;", '"').replace("#lt;", "<")
            drawn = {int(g.get("data-step", 0)): g.get("data-outcome") for g in root.iter(f"{SVG}g")
                     if g.get("data-outcome")}
            assert drawn == {s.index: s.outcome for s in saga.unwound}


def test_open_saga_is_drawn_open(mixed: Path) -> None:
    root = parse(render_animation(by_name(mixed)["crashed"]))
    assert root.get("data-verdict") == "open" and "OPEN - no end record (1 effect(s) may be standing)" in all_text(root)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)


@settings(max_examples=examples(60), deadline=None)
@given(tool=names, name=names, cause=names)
def test_any_text_in_a_log_gives_well_formed_svg(tool: str, name: str, cause: str) -> None:
    step = GraphStep(1, tool, "COMPENSABLE", "committed", "orphaned", "")
    saga = GraphSaga("0123456789abcdef", name, "rolled back", cause, (step,), 1, 2, 1)
    for text in (render_animation(saga), render_fleet([saga]), render_outcomes([saga])):
        parse(text)


# -- fleet and outcomes -----------------------------------------------------------------------


def test_fleet_stripes_every_unwind_and_says_its_verdict_in_words(mixed: Path) -> None:
    root = parse(render_fleet(reconstruct(read_records(mixed))))
    rows = {g.get("data-status") + "/" + g.get("data-verdict", ""): g for g in root.iter(f"{SVG}g")  # type: ignore[operator]
            if g.get("data-saga")}
    assert set(rows) == {"rolled back/clean", "rolled back/dirty", "completed/completed", "open/open"}
    for key, row in rows.items():
        bar = row.find(f"{SVG}rect")
        assert bar is not None
        assert (bar.get("data-hatched") == "true") == key.startswith("rolled back"), key
        assert (bar.get("fill") or "").startswith("url(#hatch-") == key.startswith("rolled back"), key
    assert "rolled back, NOT CLEAN" in all_text(rows["rolled back/dirty"])
    assert "rolled back, clean" in all_text(rows["rolled back/clean"])
    text = all_text(root)
    assert "5 saga(s)" in text and "2 NOT CLEAN" in text  # the partial unwind and the orphan


def test_outcomes_grey_out_tools_seen_fewer_than_five_times(demo_log: Path) -> None:
    root = parse(render_outcomes(reconstruct(read_records(demo_log))))
    rows = {g.get("data-tool"): g for g in root.iter(f"{SVG}g") if g.get("data-tool")}
    assert set(rows) == set(DEMO_TOOLS)
    charge = rows["stripe.charge"]  # 5 refunded + 1 refused (act II) + 1 refunded by the daemon (act III)
    assert charge.get("data-calls") == "7" and charge.get("data-sparse") == "false"
    cells = {c.get("data-outcome"): c for c in charge.iter(f"{SVG}g") if c.get("data-outcome")}
    assert "86% (6)" in all_text(cells["compensated"]) and "14% (1)" in all_text(cells["refused"])
    for tool in DEMO_TOOLS[:-1]:
        row = rows[tool]
        assert int(row.get("data-calls", 0)) < MIN_OBSERVATIONS and row.get("data-sparse") == "true"
        assert "%" not in all_text(row)
        rects = list(row.iter(f"{SVG}rect"))
        assert {r.get("fill") for r in rects} == {THEMES["light"].looks["sparse"].fill}
    assert "1" in all_text(rows["bank.wire"])


# -- themes and the command line ----------------------------------------------------------------


def _luminance(colour: str) -> float:
    channels = [int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_meets_wcag_aa_contrast_on_every_fill(theme: str) -> None:
    t = THEMES[theme]
    for surface in [t.background, *(look.fill for look in t.looks.values())]:
        assert contrast(t.ink, surface) >= 4.5, (theme, surface)
        assert contrast(t.muted, surface) >= 4.5, (theme, surface)


@pytest.mark.slow
def test_picture_verbs_fail_in_one_line(tmp_path: Path, demo_log: Path) -> None:
    for args in (["animate"], ["viz", "--kind", "fleet"], ["viz", "--kind", "chain"]):
        out = cli(*args, "--wal", str(tmp_path / "nope.wal"))
        assert out.returncode == 3 and "no log at" in out.stderr and "Traceback" not in out.stderr
        out = cli(*args, "--wal", str(tmp_path))
        assert out.returncode == 3 and "directory" in out.stderr
    out = cli("animate", "--wal", str(demo_log), "--saga", "zzzz")
    assert out.returncode == 2 and "no saga" in out.stderr
    out = cli("viz", "--wal", str(demo_log), "--kind", "pie")
    assert out.returncode == 2 and "invalid choice" in out.stderr
    empty = tmp_path / "empty.wal"
    empty.write_bytes(b"")
    out = cli("animate", "--wal", str(empty))
    assert out.returncode == 2 and "no saga" in out.stderr
    shutil.copy(demo_log, tmp_path / "copy.wal")
    with open(tmp_path / "copy.wal", "ab") as fh:
        fh.write(b"this is not a record\n{}\n")
    out = cli("viz", "--wal", str(tmp_path / "copy.wal"), "--kind", "fleet")
    assert out.returncode == 3 and "cannot read" in out.stderr
    out = cli("viz", "--wal", str(tmp_path / "copy.wal"), "--kind", "chain")
    assert out.returncode == 1 and "BROKEN at line 54" in out.stderr and "BROKEN" in out.stdout
