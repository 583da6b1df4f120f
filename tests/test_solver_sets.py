"""Stratified Connect4 solver sets: phase / difficulty labels against hand-worked positions
and bitbully, the shipped sets' invariants, and the generator on a tiny recipe."""

import errno
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from az_jax.eval import connect4_positions, solver_bench, solver_sets
from az_jax.eval.solver_bench import Position
from az_jax.eval.solver_sets import Player, Source

SETS = Path(__file__).parent / "data" / "connect4"
# A second collection, made with another seed and disjoint from the first: never chosen on.
HELDOUT = Path(__file__).parent / "data" / "connect4_heldout"
# A random game with nobody winning before the 42nd stone (found by a seeded search).
DRAWN_GAME = "44136567533446633544223266151557777121712"


needs_bitbully = pytest.mark.skipif(importlib.util.find_spec("bitbully") is None,
                                    reason="bitbully is not installed")


def _pos(moves: str, scores) -> Position:
    scores = tuple(None if s == "x" else s for s in scores)
    return Position(moves, max(s for s in scores if s is not None), scores)


# ------------------------------------------------------------------ labels by hand
@pytest.mark.parametrize("stones, phase", [(0, "beginning"), (13, "beginning"),
                                           (14, "middle"), (27, "middle"), (28, "end"),
                                           (41, "end")])
def test_phase_boundaries(stones, phase):
    moves = DRAWN_GAME[:stones]
    assert connect4_positions._check_moves(moves)[1] is None
    assert solver_sets.phase(moves) == phase


def test_phase_rejects_full_board():
    with pytest.raises(ValueError, match="0-41 stones"):
        solver_sets.phase("1" * 42)


@pytest.mark.parametrize("scores, k_n, label", [
    ((-2, -1, 0, 1, 0, -1, -2), (1, 7), "hard"),   # the empty board: only the centre wins
    ((5, 2, -1, -1, -1, -1, -1), (2, 7), "medium"),  # two wins of different speed: k=2
    ((0, 0, 0, -1, -1, -1, -1), (3, 7), "medium"),  # k = 3 <= 7/2
    ((1, 1, 1, 1, -1, -1, -1), (4, 7), "easy"),    # k = 4 > 7/2
    ((0, 0, "x", "x", "x", "x", -3), (2, 3), "easy"),  # full columns are not moves
    ((0, -4, "x", "x", "x", "x", "x"), (1, 2), "hard"),
    ((1, 1, -1, -1, "x", "x", "x"), (2, 4), "medium"),  # k = n/2 exactly: not > n/2
    ((0, 0, 0, -1, -1, -1, "x"), (3, 6), "medium"),
    ((-3, -3, -5, -3, -3, -3, -3), (7, 7), "none"),  # all lose: no mistake possible
    ((2, 3, "x", 4, 4, 9, 1), (6, 6), "none"),
])
def test_difficulty_from_column_scores(scores, k_n, label):
    p = _pos("", scores)
    assert solver_sets.keep_count(p) == k_n
    assert solver_sets.difficulty(p) == label


def test_hand_worked_forced_win():
    # a a a . b b b on the bottom row, first player to move: column 4 wins at once, any
    # other move lets the second player win there. Exactly one move keeps the win.
    moves = "152637"
    scores = (-18, -18, -18, 18, -18, -18, -18)  # what a solver must say, by hand
    p = _pos(moves, scores)
    assert solver_sets.set_name(p) == "beginning_hard"


@pytest.mark.parametrize("moves, why", [
    ("112233", None),
    ("1122334", "already won at move 7 of 7"),  # four in a row on the bottom row, exactly
    # The first player's stones at (row, column) (0, 5), (1, 4), (2, 3), (3, 2), 1-based
    # columns: a diagonal down to the right, completed by the 11th stone; and its mirror.
    ("5323463242", None),
    ("53234632422", "already won at move 11 of 11"),
    ("35654256466", "already won at move 11 of 11"),
    (DRAWN_GAME, None),
    (DRAWN_GAME + "2", "the board is full"),  # the 42nd stone, in the last free cell
    ("1111111", "move 7 plays column 1, which is full"),
])
def test_check_moves_by_hand(moves, why):
    found = connect4_positions._check_moves(moves)[1]
    assert found is None if why is None else why in found


def test_parse_line_full_columns():
    # Column 1 holds six stones (no four of one side): full, so its score must be 'x'.
    p = connect4_positions.parse_line("111111 0 x,0,0,0,0,0,0")
    assert p.column_scores[0] is None and p.outcomes().tolist() == [-2, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="marked full"):
        connect4_positions.parse_line("11111 0 x,0,0,0,0,0,0")
    with pytest.raises(ValueError, match="its score must be 'x'"):
        connect4_positions.parse_line("111111 0 0,0,0,0,0,0,0")


def test_board_key_transpositions_and_mirrors():
    key = solver_sets.board_key
    assert key("1234") == key("3214")  # same stones, other move order
    assert key("1") == key("7") and key("12") == key("76")  # mirror images
    assert key("12") != key("21")  # whose stone is where matters
    assert key("4") != key("44")


# ------------------------------------------------------------------ the shipped sets
def _read(directory, allow_empty=False):
    return {name: solver_bench.read_positions(directory / f"{name}.txt", allow_empty)
            for name in solver_sets.set_names()}


@pytest.fixture(scope="module", params=[SETS, HELDOUT], ids=["sets", "heldout"])
def shipped(request):
    return _read(request.param)


def _keys(sets):
    return {solver_sets.board_key(p.moves) for v in sets.values() for p in v}


@pytest.mark.parametrize("directory", [SETS, HELDOUT], ids=["sets", "heldout"])
def test_shipped_sets_labels_sizes_and_disjoint(directory):
    keys = set()
    sets = _read(directory)
    for name, positions in sets.items():
        header = (directory / f"{name}.txt").read_text().splitlines()[0]
        assert len(positions) == 200 or "short of the 200" in header, name
        for p in positions:
            assert solver_sets.set_name(p) == name, (name, p)
            keys.add(solver_sets.board_key(p.moves))
    total = sum(len(v) for v in sets.values())
    assert len(keys) == total  # no board twice, mirrors included, across all sets


def test_heldout_shares_no_board_with_the_sets():
    assert not _keys(_read(SETS)) & _keys(_read(HELDOUT))


@needs_bitbully
def test_shipped_labels_agree_with_bitbully(shipped):
    for name, positions in shipped.items():
        for p in positions[:: max(1, len(positions) // 3)][:3]:
            solved = connect4_positions.solve(p.moves)
            assert solved == p
            assert solver_sets.set_name(solved) == name


@needs_bitbully
def test_hand_worked_forced_win_bitbully():
    p = connect4_positions.solve("152637")
    # Pons's scale: a win is worth 22 - the stones the winner plays (4 here).
    assert p.column_scores == (-18, -18, -18, 18, -18, -18, -18)
    assert solver_sets.set_name(p) == "beginning_hard"
    assert solver_sets.difficulty(connect4_positions.solve("")) == "hard"


# ------------------------------------------------------------------ the generator
@needs_bitbully
def test_generate_draws_distinct_positions_of_every_length():
    # Exactly 7 positions have 1 stone: asking for 7 must give each of them once.
    got = connect4_positions.generate(7, 1, 1, seed=0)
    assert sorted(p.moves for p in got) == ["1", "2", "3", "4", "5", "6", "7"]
    # Negamax of the empty board's column scores (-2, -1, 0, 1, 0, -1, -2; Pons's blog):
    # after the first stone in column c the second player's score is minus column c's.
    assert {p.moves: p.score for p in got} == dict(zip("1234567", (2, 1, 0, -1, 0, 1, 2),
                                                       strict=True))
    with pytest.raises(ValueError, match="could not find 8 distinct"):
        connect4_positions.generate(8, 1, 1, seed=0)


def test_the_empty_board_never_goes_into_a_set_file():
    """Pons's format names a position by its moves, so the empty board has no line (it was
    written as ' 1 ...' and read back as moves '1'): the sets' candidates start at one
    stone, the generator at `min_moves` 1, and writing it is an error."""
    assert solver_sets.candidates(["4455", "12"]) == ["4", "44", "445", "1"]
    with pytest.raises(ValueError, match="the empty board has no line"):
        Position("", 1, (-2, -1, 0, 1, 0, -1, -2)).to_line()
    with pytest.raises(ValueError, match="need 1 <= min_moves"):
        connect4_positions.generate(1, 0, 3, seed=0)


@needs_bitbully
def test_label_checks_the_files_score():
    (p,) = connect4_positions.label([Position("152637", 18)])
    assert p.column_scores == (-18, -18, -18, 18, -18, -18, -18)  # by hand, see above
    with pytest.raises(ValueError, match="the file says 0, bitbully 18"):
        connect4_positions.label([Position("152637", 0)])


@needs_bitbully
def test_make_sets_tiny_recipe():
    import envs

    # The shipped network sees threat planes the plain game has not: it plays through them.
    recipe = [Source(Player("random"), Player("random"), 6),
              Source(Player("bitbully", epsilon=0.3), Player("random"), 6),
              Source(Player("policy"), Player("search", 2), 2)]
    exclude = ["", "4"]
    players = solver_sets._Players(envs.make("connect4"), "connect4")
    sets, origin, stats = solver_sets.make_sets(recipe, per_set=5, seed=1, exclude=exclude,
                                                log=lambda _: None, players=players)
    assert set(sets) == set(solver_sets.set_names())
    keys = [solver_sets.board_key(p.moves) for v in sets.values() for p in v]
    assert len(keys) == len(set(keys))
    assert not {solver_sets.board_key(m) for m in exclude} & set(keys)
    for name, positions in sets.items():
        assert len(positions) <= 5
        assert sum(origin[name].values()) == len(positions)
        for p in positions:
            assert solver_sets.set_name(p) == name
            assert connect4_positions.solve(p.moves) == p
    assert stats["games"] == 14 and stats["solved"] >= sum(len(v) for v in sets.values())
    again, _, _ = solver_sets.make_sets(recipe, per_set=5, seed=1, exclude=exclude,
                                        log=lambda _: None, players=players)
    assert again == sets  # fixed seeds: the same sets


@needs_bitbully
def test_make_sets_counts_the_games_positions_not_the_excluded():
    """stats["candidates"] (make-sets prints it as the distinct positions) counts the games'
    boards: an excluded board that no game reaches (40 stones of a drawn game) adds none
    (it had added one per excluded board)."""
    import envs

    recipe = [Source(Player("random"), Player("random"), 4)]
    players = solver_sets._Players(envs.make("connect4"), "connect4")
    kw = dict(per_set=1, seed=0, log=lambda _: None, players=players)
    plain = solver_sets.make_sets(recipe, **kw)[2]["candidates"]
    assert plain > 0
    assert solver_sets.make_sets(recipe, exclude=[DRAWN_GAME[:40]], **kw)[2][
        "candidates"] == plain


@needs_bitbully
def test_make_sets_cli_exclude(tmp_path, monkeypatch):
    # A tiny recipe (the CLI's own is minutes of games): the second run leaves out the first.
    # The bitbully games reach the end phase: its sets are never empty (7 end-medium
    # positions in all, 2 for each run), which make-sets refuses.
    bitbully = Player("bitbully", epsilon=0.15)
    monkeypatch.setattr(solver_sets, "DEFAULT_RECIPE", (
        Source(Player("random"), Player("random"), 30),
        Source(Player("onestep"), Player("random"), 30), Source(bitbully, bitbully, 20)))
    first, second = tmp_path / "a", tmp_path / "b"
    argv = ["make-sets", "--per-set", "2", "--seed", "3", "--quiet", "--out"]
    assert solver_bench.main([*argv, str(first)]) == 0
    assert solver_bench.main([*argv, str(second), "--exclude", str(first)]) == 0
    a, b = _read(first), _read(second)
    assert _keys(a) and _keys(b) and not _keys(a) & _keys(b)
    assert f"--exclude {first}" in (second / "beginning_easy.txt").read_text()
    assert solver_bench.main([*argv, str(tmp_path / "c"), "--exclude",
                              str(tmp_path / "none")]) == 2  # a clear error, nothing written
    assert not (tmp_path / "c").exists()


@needs_bitbully
def test_make_sets_writes_no_set_without_positions(tmp_path, monkeypatch, capsys):
    """Two random games (seed 0, 20 plies on average) reach no middle-hard and no end-phase
    position: make-sets had written those sets as files without positions, which its own
    loader (`load_sets`, so `evaluate` and bench learn) refuses. It now names them and what
    to do, on one line, and writes nothing: a folder it made is gone again, an existing
    one keeps its old files."""
    monkeypatch.setattr(solver_sets, "DEFAULT_RECIPE",
                        (Source(Player("random"), Player("random"), 2),))
    argv = ["make-sets", "--per-set", "1", "--seed", "0", "--quiet", "--out"]
    assert solver_bench.main([*argv, str(tmp_path / "new" / "sets")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "middle_hard, end_easy, end_medium, end_hard" in err and "--games-scale" in err
    assert not (tmp_path / "new").exists()
    old = tmp_path / "old"
    old.mkdir()
    (old / "end_hard.txt").write_text("44 1 -2,-1,0,1,0,-1,-2\n")
    assert solver_bench.main([*argv, str(old)]) == 2
    assert [f.name for f in old.iterdir()] == ["end_hard.txt"]
    assert solver_bench.load_sets([str(old)])  # still loads


# Writes the nine set names into argv[1] (make-sets' `write_files` call), SIGKILLed at the
# argv[2]-th rename: the real failure, no `finally` and no `except` run.
_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from az_jax.eval import connect4_positions, solver_sets
kill_at, calls = int(sys.argv[2]), [0]
def killing(real):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return call
os.rename, os.replace = killing(os.rename), killing(os.replace)
out = Path(sys.argv[1])
connect4_positions.write_files({out / f"{p}_{d}.txt": f"new {p}_{d}\\n"
                                for p in solver_sets.PHASES for d in solver_sets.DIFFICULTIES})
"""


def test_make_sets_files_are_replaced_all_or_none_even_when_killed(tmp_path):
    """make-sets' nine files went to temporaries, then were renamed one by one: a kill
    between two renames left new sets beside old ones, a collection no run ever made. A
    process killed at each rename in turn now leaves the nine old sets or the nine new ones
    (the folder missing for an instant, the old sets then intact beside it), with their
    modes kept."""
    names = [f"{p}_{d}.txt" for p in solver_sets.PHASES for d in solver_sets.DIFFICULTIES]
    outcomes = []
    for kill_at in range(1, 11):
        root = tmp_path / str(kill_at)
        out = root / "sets"
        out.mkdir(parents=True)
        for name in names:
            (out / name).write_text(f"old {name[:-4]}\n")
            (out / name).chmod(0o640)
        out.chmod(0o750)
        proc = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(out), str(kill_at)],
                              cwd=Path(__file__).resolve().parents[1], capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode in (0, -signal.SIGKILL), proc.stderr
        where = out if out.exists() else next(root.glob(".sets.old-*"))
        texts = {f.name: f.read_text() for f in where.iterdir() if f.name[0] != "."}
        assert sorted(texts) == sorted(names), (kill_at, sorted(texts))
        ages = {text.split()[0] for text in texts.values()}
        assert len(ages) == 1, (kill_at, texts)  # never a mix of old and new sets
        assert texts[names[0]] == f"{ages.pop()} {names[0][:-4]}\n"
        assert {(where / n).stat().st_mode & 0o777 for n in names} == {0o640}
        assert where.stat().st_mode & 0o777 == 0o750
        outcomes.append((proc.returncode == 0, out.exists()))
        # What the kill left beside the folder: the old sets lead back (with the folder
        # missing, the error says where they wait), and the next write puts them in place
        # first and leaves nothing hidden beside them.
        if not out.exists():
            with pytest.raises(FileNotFoundError, match=r"sets wait in .*\.sets\.old-"):
                solver_bench.expand_paths([str(out)])
        connect4_positions.recover_swap(out)
        assert sorted(f.name for f in out.iterdir()) == sorted(names), kill_at
        age = texts[names[0]].split()[0]  # the group the kill left, now in place
        assert {(out / n).read_text().split()[0] for n in names} == {age}, kill_at
        assert [p.name for p in root.iterdir()] == ["sets"], (kill_at, list(root.iterdir()))
        assert (out / names[0]).stat().st_mode & 0o777 == 0o640
    assert outcomes[-1] == (True, True)  # not killed: the new sets in place
    assert any(not exists for _, exists in outcomes)  # a kill left the folder missing
    assert (tmp_path / "10" / "sets" / names[0]).read_text().startswith("new ")


def test_a_swap_s_leftovers_are_put_right_for_their_own_folder_only(tmp_path):
    """`recover_swap(sets)` took `.sets.v2.old-*` (the leftover of a folder `sets.v2`) for
    its own: it deleted its files, or moved them into `sets`. And a leftover named with
    this process's pid (a container's command often has the same pid every run) was
    taken for one still being written, and never put right."""
    sibling = tmp_path / ".sets.v2.old-999999.abcd1234"  # pid 999999: not running
    sibling.mkdir()
    (sibling / "a.txt").write_text("sets.v2's only copy")
    connect4_positions.recover_swap(tmp_path / "sets")  # `sets` missing: not taken
    assert not (tmp_path / "sets").exists() and (sibling / "a.txt").exists()
    (tmp_path / "sets").mkdir()
    connect4_positions.recover_swap(tmp_path / "sets")  # `sets` there: not emptied either
    assert (sibling / "a.txt").read_text() == "sets.v2's only copy"
    assert connect4_positions.swap_leftovers(tmp_path / "sets") == []
    assert connect4_positions.swap_leftovers(tmp_path / "sets.v2") == [sibling]
    os.rmdir(tmp_path / "sets")
    mine = tmp_path / f".sets.old-{os.getpid()}.0123abcd"
    mine.mkdir()
    (mine / "b.txt").write_text("old sets")
    connect4_positions.recover_swap(tmp_path / "sets")
    assert (tmp_path / "sets" / "b.txt").read_text() == "old sets" and not mine.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux's /proc")
def test_a_leftover_whose_pid_a_later_process_took_is_put_right(tmp_path):
    """A killed writer's leftover was named with its pid alone: once another process had
    that pid (a long-lived one, or a container's next command), `recover_swap` took the
    writer for still running and never put the old sets back. The name now carries the
    writer's start time, read here from /proc independently of the module."""
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            fields = Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()
            start = int(fields[19])  # field 22 of proc(5), counted after the name
            writing = tmp_path / f".sets.old-{other.pid}-{start}.0123abcd"
            writing.mkdir()
            (writing / "a.txt").write_text("still being swapped")
            connect4_positions.recover_swap(tmp_path / "sets")  # that process runs: untouched
            assert not (tmp_path / "sets").exists() and (writing / "a.txt").exists()
            writing.rename(tmp_path / f".sets.old-{other.pid}-{start + 1}.0123abcd")
            connect4_positions.recover_swap(tmp_path / "sets")  # the pid's now another's
            assert (tmp_path / "sets" / "a.txt").read_text() == "still being swapped"
            assert connect4_positions.swap_leftovers(tmp_path / "sets") == []
        finally:
            other.kill()


def test_make_sets_writes_in_place_where_a_new_folder_would_be_noticed(tmp_path, monkeypatch):
    """The folder swap is only for a folder nobody notices being replaced. Where the process
    works in it (a shell there was left in the removed old folder, seeing nothing), where
    the system refuses the rename (a mount point, EBUSY: the swap raised after the whole
    solver run), or where another user owns it (the new folder was this process's), the
    nine files are replaced one by one in the same folder: the same inode and owner."""
    names = [f"{p}_{d}.txt" for p in solver_sets.PHASES for d in solver_sets.DIFFICULTIES]

    def fresh(tag):
        out = tmp_path / tag / "sets"
        out.mkdir(parents=True)
        for name in names:
            (out / name).write_text(f"old {name}\n")
        return out, out.stat().st_ino

    def replaced_in_place(out, inode):
        assert out.stat().st_ino == inode
        assert sorted(f.name for f in out.iterdir()) == sorted(names)  # no temporary left
        assert all((out / n).read_text() == f"new {n}\n" for n in names)
        assert list(out.parent.iterdir()) == [out]  # no .sets.new-* or .sets.old-* beside it

    out, inode = fresh("cwd")
    monkeypatch.chdir(out)  # make-sets --out . run in the sets' folder
    connect4_positions.write_files({Path(n): f"new {n}\n" for n in names})
    assert os.listdir(".")  # still the folder the files are in
    monkeypatch.chdir(tmp_path)
    replaced_in_place(out, inode)

    out, inode = fresh("busy")
    rename = os.rename

    def busy(src, dst):  # what the kernel answers for a mount point
        if Path(src).is_dir():
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(src))
        return rename(src, dst)

    with monkeypatch.context() as m:
        m.setattr(os, "rename", busy)
        connect4_positions.write_files({out / n: f"new {n}\n" for n in names})
    replaced_in_place(out, inode)

    if os.geteuid() == 0:  # root can hand the folder to another user
        out, inode = fresh("owner")
        os.chown(out, 4321, 4321)
        connect4_positions.write_files({out / n: f"new {n}\n" for n in names})
        replaced_in_place(out, inode)
        assert (out.stat().st_uid, out.stat().st_gid) == (4321, 4321)


def test_write_positions_writes_only_what_read_positions_reads(tmp_path):
    """No position: an error, and no file (it wrote a file `read_positions` refuses). An
    existing file stays as it was, and no temporary file is left beside it."""
    path = tmp_path / "set.txt"
    with pytest.raises(ValueError, match="no positions to write"):
        solver_bench.write_positions(path, [], "a header")
    assert not path.exists()
    p = Position("44", 1, (-2, -1, 0, 1, 0, -1, -2))
    solver_bench.write_positions(path, [p], "a header")
    path.chmod(0o640)
    with pytest.raises(ValueError, match="the empty board has no line"):
        solver_bench.write_positions(path, [p, Position("", 1, p.column_scores)])
    assert solver_bench.read_positions(path) == [p] and os.listdir(tmp_path) == ["set.txt"]
    solver_bench.write_positions(path, [p, p])
    assert len(solver_bench.read_positions(path)) == 2 and path.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("command", ["make-sets", "evaluate"])
@pytest.mark.parametrize("seed", [str(2**70), "-1", str(2**32)])
def test_solver_bench_seeds_are_checked_by_argparse(tmp_path, monkeypatch, command, seed):
    """0 to 2**32 - 1, as every command line's seed (README): 2**70 was a PRNGKey traceback
    (evaluate) and -1 an error after the games were played (make-sets)."""
    monkeypatch.setattr(solver_sets, "make_sets", lambda *a, **k: pytest.fail("it played"))
    argv = (["make-sets", "--out", str(tmp_path / "out")] if command == "make-sets" else
            ["evaluate", str(tmp_path / "unused.txt"), "--model", "connect4"])
    with pytest.raises(SystemExit) as e:
        solver_bench.main([*argv, "--seed", seed])
    assert e.value.code == 2


@pytest.mark.parametrize("scale", ["inf", "nan", "0"])
def test_make_sets_refuses_a_games_scale_that_is_no_finite_positive_number(tmp_path, capsys,
                                                                          scale):
    # (inf had raised an OverflowError, nan said "cannot convert float NaN to integer")
    assert solver_bench.main(["make-sets", "--out", str(tmp_path / "out"), "--games-scale",
                              scale, "--quiet"]) == 2
    assert "--games-scale" in capsys.readouterr().err and not (tmp_path / "out").exists()


# ------------------------------------------------------------------ one table for all sets
def test_summary_table_pools_sets_and_phases(tmp_path):
    def row(file, agent, n, mistakes, rand):
        return {"file": file, "agent": agent, "positions": n, "critical": n,
                "mistakes": mistakes, "rate": mistakes / n, "critical_rate": mistakes / n,
                "random_rate": rand}

    rows = [row("d/beginning_easy.txt", "net", 10, 1, 0.3),
            row("d/beginning_hard.txt", "net", 30, 9, 0.8),
            row("d/end_hard.txt", "net", 20, 10, 0.6)]
    s = {r["set"]: r for r in solver_bench.summarize(rows)}
    assert s["beginning_hard"]["rates"]["net"] == pytest.approx(0.3)
    assert s["beginning (all)"]["positions"] == 40
    assert s["beginning (all)"]["rates"]["net"] == pytest.approx(10 / 40)
    assert s["beginning (all)"]["random_rate"] == pytest.approx((3 + 24) / 40)
    assert s["all sets"]["rates"]["net"] == pytest.approx(20 / 60)
    assert "end (all)" in s and "middle (all)" not in s
    text = solver_bench.format_table(rows)
    assert text.splitlines()[-1].split()[:3] == ["all", "sets", "60"]
    # A second agent on the same positions: counts stay per position, each agent's rates
    # its own mistakes over them (hand-counted).
    two = rows + [row("d/beginning_easy.txt", "mcts", 10, 0, 0.3),
                  row("d/beginning_hard.txt", "mcts", 30, 3, 0.8),
                  row("d/end_hard.txt", "mcts", 20, 1, 0.6)]
    s = {r["set"]: r for r in solver_bench.summarize(two)}
    assert (s["beginning (all)"]["positions"], s["beginning (all)"]["critical"]) == (40, 40)
    assert (s["all sets"]["positions"], s["all sets"]["critical"]) == (60, 60)
    assert s["beginning (all)"]["rates"] == pytest.approx({"net": 10 / 40, "mcts": 3 / 40})
    assert s["all sets"]["rates"] == pytest.approx({"net": 20 / 60, "mcts": 4 / 60})
    assert s["all sets"]["random_rate"] == pytest.approx((3 + 24 + 12) / 60)
    # A directory stands for its set files, the nine names first in their order.
    for name in ("zz_other", "end_hard", "beginning_easy"):
        (tmp_path / f"{name}.txt").write_text("44 1 -2,-1,0,1,0,-1,-2\n")
    assert [Path(p).stem for p in solver_bench.expand_paths([str(tmp_path)])] == [
        "beginning_easy", "end_hard", "zz_other"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no solver set files"):
        solver_bench.expand_paths([str(tmp_path / "empty")])
