import json

from pytest_specbound.advisers.calibrate import apply, propose
from pytest_specbound.cli import main
from pytest_specbound.gate.verdicts.result import ClassResult

TEXT = """[classes.coding]  # the hard class
prompts = "coding"
accept = [2.8, 3.4]  # from the seed
min_efficiency = 0.70

[classes.chat]
prompts = "chat"
"""


def result(**fields):
    """A class result as the results JSON has it (the keys a test cares about)."""
    return ClassResult.from_json({"budget": "b.toml", "class": "c", "hardware": "h", **fields})


def test_propose_rounds_outward_and_caps():
    values = propose(result(bounds={"accept_length": [3.02, 3.31], "efficiency": [0.74, 0.8]},
                            roofline={"max_accept": 4}))
    # one resolution (5%) outside the interval, rounded outward: 3.02 x 0.95, 3.31 x 1.05
    assert values == {"accept": [2.85, 3.5], "min_efficiency": 0.7}
    capped = propose(result(bounds={"accept_length": [3.8, 3.97]}, roofline={"max_accept": 4}))
    assert capped["accept"][1] == 4


def test_apply_keeps_comments_and_other_tables():
    new = apply(TEXT, "classes.coding", {"accept": [2.9, 3.45], "min_efficiency": 0.69})
    assert "accept = [2.9, 3.45]  # from the seed" in new
    assert "min_efficiency = 0.69\n" in new and "[classes.chat]" in new
    added = apply(TEXT, "classes.chat", {"min_efficiency": 0.5})
    assert added.endswith('prompts = "chat"\nmin_efficiency = 0.50\n')


def test_report_merges_and_exit_code(tmp_path, capsys):
    row = {"budget": "b/x.toml", "class": "coding", "hardware": "h100", "accept_length": 3.1,
           "accept_band": [2.8, 3.4], "decode_tok_s": 150.0, "floor_tok_s": 120.0,
           "roofline_tok_s": 190.0, "efficiency": 0.79, "verdict": "pass"}
    (tmp_path / "a.json").write_text(json.dumps({"results": [row]}))
    (tmp_path / "b.json").write_text(json.dumps({"results": [{**row, "hardware": "a6000x2",
                                                              "verdict": "fail"}]}))
    code = main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    assert code == 1 and "h100" in out and "a6000x2" in out and "FAIL" in out
    (tmp_path / "c.json").write_text("[1, 2]")
    assert main(["report", str(tmp_path / "c.json")]) == 2
    assert "not a specbound results file" in capsys.readouterr().err


def test_timing_notes_reach_the_summary_and_the_markdown():
    from pytest_specbound.report.table import markdown, terminal

    r = ClassResult.from_json({
        "budget": "budgets/b.toml", "class": "chat", "hardware": "h100", "verdict": "pass",
        "clock_note": "client and server clocks disagree: the client's decode rate is +9% off"})
    assert "note: b.toml::chat[h100]: client and server clocks disagree" in terminal([r])
    assert "- note: b.toml::chat[h100]: client and server clocks disagree" in markdown([r])


def test_plot_labels_of_close_points_do_not_overlap():
    from pytest_specbound.report.plot import LABEL_PT, label_offsets

    points = [(100.0, 200.0), (104.0, 201.0), (98.0, 199.0), (400.0, 200.0)]
    offsets = label_offsets(points)
    ys = [y + dy for (_, y), dy in zip(points[:3], offsets[:3], strict=True)]
    assert all(abs(a - b) >= LABEL_PT for i, a in enumerate(ys) for b in ys[i + 1:])
    assert offsets[1] == -12.0 and offsets[3] == -12.0  # the highest, and one far away: in place
    assert ys[1] > ys[0] > ys[2]  # labels keep the points' vertical order


def test_report_plots_a_row_of_panels_per_hardware(tmp_path, capsys):
    """Runs merged from several runners: each hardware gets its own row in the plot."""
    from matplotlib.image import imread

    row = {"budget": "b/x.toml", "class": "coding", "hardware": "h100", "accept_length": 3.1,
           "accept_band": [2.8, 3.4], "decode_tok_s": 150.0, "verdict": "pass",
           "roofline": {"round_ms": 20.0, "max_accept": 4},
           "bounds": {"accept_length": [3.0, 3.2], "decode_tok_s": [140.0, 160.0]}}
    (tmp_path / "a.json").write_text(json.dumps({"results": [row]}))
    (tmp_path / "b.json").write_text(json.dumps({"results": [{**row, "hardware": "a6000x2"}]}))
    assert main(["report", str(tmp_path / "a.json"), "--plot", str(tmp_path / "one.png")]) == 0
    assert main(["report", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--plot",
                 str(tmp_path / "two.png")]) == 0
    capsys.readouterr()
    one, two = imread(tmp_path / "one.png"), imread(tmp_path / "two.png")
    assert two.shape[0] > 1.7 * one.shape[0]  # two rows of panels
    assert abs(two.shape[1] - one.shape[1]) < 0.1 * one.shape[1]  # as wide
