"""The plots of a run (az_jax/plots.py), host side: the series they draw from hand-worked
records, and `metrics.jsonl` read as a killed run leaves it. (That a run writes the PNGs is
checked by the slow end-to-end tests.)"""

from az_jax import plots


def test_win_rates_are_scores_of_the_main_network_per_opponent():
    """win_rates.png's series from hand-worked Elo records: score = (wins + draws / 2) /
    games, from the network's side whichever side of the record it is on; a match with a
    newer network counts for the newer one only ("older networks"); the same network
    played another way is its own line; the network played greedily is not the main line,
    even when greedy names are the most common."""
    def rec(a, b, wins, draws, losses):
        return {"a": a, "b": b, "wins": wins, "draws": draws, "losses": losses}

    data = {"matches": [
        rec("iter-2/mcts:8", "random", 3, 2, 1),  # 4 / 6
        rec("random", "iter-1/mcts:8", 1, 1, 2),  # iteration 1: 2.5 / 4
        rec("iter-1/mcts:8", "iter-2/mcts:8", 1, 0, 3),  # iteration 2 won 3 of 4
        rec("iter-2/mcts:8", "iter-2/greedy", 2, 0, 0),
        rec("iter-1/greedy", "random", 0, 0, 2), rec("random", "iter-3/greedy", 1, 0, 0),
    ]}
    series = plots._win_rate_series(data)
    assert series == {"random": [(1, 2.5 / 4), (2, 4 / 6)], "older networks": [(2, 0.75)],
                      "greedy": [(2, 1.0)]}


def test_metrics_with_a_torn_last_line_are_read(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1, "loss": 2.0}\n'
                                            '{"iteration": 2, "loss": 1.5}\n{"iterat')
    assert plots.read_metrics(tmp_path) == [{"iteration": 1, "loss": 2.0},
                                            {"iteration": 2, "loss": 1.5}]
    assert plots.read_metrics(tmp_path / "none") == []


def test_a_plot_interrupted_while_written_leaves_the_old_one(tmp_path, monkeypatch):
    """PNGs were written in place: Ctrl-C or a kill mid-write left a truncated one. Now a
    temporary file takes the bytes and one rename puts it in place."""
    from matplotlib.figure import Figure

    plt = plots._pyplot()
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    old = tmp_path / "elo.png"
    old.write_bytes(b"the old plot")

    def torn(self, path, **kwargs):
        with open(path, "wb") as f:
            f.write(b"\x89PNG half")
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(Figure, "savefig", torn)
        try:
            plots._save(fig, old)
        except KeyboardInterrupt:
            pass
        else:
            raise AssertionError("the interrupt was swallowed")
    assert old.read_bytes() == b"the old plot"
    assert [p.name for p in tmp_path.iterdir()] == ["elo.png"]  # no temporary file left
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    plots._save(fig, old)  # written whole: a real PNG replaces it
    assert old.read_bytes().startswith(b"\x89PNG\r\n") and len(old.read_bytes()) > 1000
