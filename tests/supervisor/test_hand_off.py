"""The hand-off (worker/harness/sharing.py, ``Link.share``): the child's set-up makes the
parameters' storage and gives it to its supervisor, once, before any of the learner's code; the
supervisor holds it to the layout the kind asked for, maps it, and reads the parameters from
its own mapping at each sync and at the end. Standard library only (conftest): the hand-off is
made here of a sealed memory file, as ``sharing.export_cpu`` makes it of torch's tensors
(tests/worker/test_harness.py runs it end to end through a kind)."""

from tests.supervisor.conftest import HAND_OFF, LAYOUT3, REPORT, supervised
from worker.checks import Interfered, observed


def refusal(out: dict) -> dict:
    """The one protocol note the supervisor made, with the child killed and unreported."""
    assert out["report"] is None
    notes = out["observed"]["interfered"]
    assert notes and notes[0]["key"] == "protocol", notes
    return notes[0]["values"]


def test_the_supervisors_reads_follow_the_childs_mapping():
    out = supervised(
        HAND_OFF
        + f"""
def part(link):
    mapped, answered = hand_off(link, [0.0, 0.0, 0.0])
    assert answered
    for step in range(3):
        write(mapped, [step + 1.0, -(step + 1.0), float("inf") if step == 2 else 0.5])
        link.sync("step", step, snapshot=True)
    write(mapped, [10.0, 20.0, 30.0])  # after the last sync: read at the end, the child dead
    return {REPORT}
""",
        layout=LAYOUT3,
    )
    seen = out["observed"]
    assert seen["interfered"] is None
    assert seen["snapshots"] == [[1.0, -1.0, 0.5], [2.0, -2.0, 0.5], [3.0, -3.0, None]]
    assert seen["final_params"] == [10.0, 20.0, 30.0]
    assert seen["counts"] == {"step": 3}  # the hand-off is no sync


def test_the_hand_off_comes_before_anything_else_the_child_sends():
    # the set-up hands over before the learner's file is loaded: a sync first is not the harness's
    values = refusal(
        supervised(
            HAND_OFF
            + """
def part(link):
    link.sync("step", 0, snapshot=True)
    hand_off(link, [0.0, 0.0, 0.0])
    time.sleep(30)
""",
            layout=LAYOUT3,
        )
    )
    assert values == {"message": "share-first"}
    # a report with no hand-off and no failure said is not one either
    out = supervised(f"def part(link):\n    return {REPORT}\n", layout=LAYOUT3)
    assert out["observed"]["interfered"] == [{"key": "protocol", "values": {"message": "share-missing"}}]
    assert out["observed"]["final_params"] is None
    with __import__("pytest").raises(Interfered):
        observed({"observed": out["observed"]})


def test_a_set_up_that_failed_before_its_hand_off_reports_its_error():
    out = supervised(
        """
def part(link):
    error = {"phase": "harness", "type": "ValueError", "message": "x", "traceback": []}
    return json.dumps({"t": "report", "data": None, "output": "", "dropped": 0, "error": error}).encode()
""",
        layout=LAYOUT3,
    )
    assert out["observed"]["interfered"] is None and out["report"]["error"]["phase"] == "harness"


def test_a_layout_other_than_the_one_asked_for_is_refused():
    cases = {
        "dtype": ('layout_message(values, dtype="float32", size=24)', {"reason": "dtype", "tensor": 0}),
        "shape": ("layout_message(values, shape=[1, 3])", {"reason": "shape", "tensor": 0}),
        "size": ("layout_message(values, size=4096)", {"reason": "size"}),
        "count": (
            '{**layout_message(values), "tensors": layout_message(values)["tensors"] * 2}',
            {"reason": "count", "sent": 2, "expected": 1},
        ),
        "device": ('{**layout_message(values), "device": "cuda"}', {"reason": "device", "sent": "cuda"}),
    }
    for name, (message, expected) in cases.items():
        values = refusal(
            supervised(
                HAND_OFF
                + f"""
def part(link):
    values = [0.0, 0.0, 0.0]
    mapped, answered = hand_off(link, values, message={message})
    os._exit(5 if answered else 6)
""",
                layout=LAYOUT3,
            )
        )
        assert values["message"] == "share-refused", name
        assert {k: values[k] for k in expected} == expected, (name, values)


def test_a_file_that_could_shrink_under_the_supervisor_or_two_files_are_refused():
    # unsealed, the child could truncate it and the supervisor's next read would fault
    values = refusal(
        supervised(
            HAND_OFF + "\ndef part(link):\n    hand_off(link, [0.0] * 3, seal=False)\n    time.sleep(30)\n",
            layout=LAYOUT3,
        )
    )
    assert values == {"message": "share-refused", "reason": "seals"}
    values = refusal(
        supervised(
            HAND_OFF
            + """
def part(link):
    fd, _ = shared_file([0.0] * 3)
    hand_off(link, [0.0] * 3, fds=[fd, fd])
    time.sleep(30)
""",
            layout=LAYOUT3,
        )
    )
    assert values == {"message": "share-refused", "reason": "descriptors", "sent": 2}


def test_a_second_hand_off_is_refused_and_its_descriptor_never_reaches_the_supervisor():
    out = supervised(
        HAND_OFF
        + """
def part(link):
    mapped, answered = hand_off(link, [1.0, 2.0, 3.0])
    link.sync("step", 0, snapshot=True)
    # the learner's: another file, of other values, passed as a hand-off
    other, _ = hand_off(link, [7.0, 7.0, 7.0])
    time.sleep(30)
""",
        layout=LAYOUT3,
    )
    assert refusal(out) == {"message": "share-again"}
    # what the supervisor read is still the first mapping's
    assert out["observed"]["snapshots"] == [[1.0, 2.0, 3.0]]
    assert out["observed"]["final_params"] == [1.0, 2.0, 3.0]


def test_a_hand_off_no_kind_asked_for_is_refused():
    out = supervised(HAND_OFF + "\ndef part(link):\n    hand_off(link, [0.0] * 3)\n    time.sleep(30)\n")
    assert refusal(out) == {"message": "share-unasked"}
    assert out["observed"]["final_params"] is None


def test_a_descriptor_sent_with_a_sync_is_dropped_unread():
    out = supervised(
        HAND_OFF
        + f"""
def part(link):
    mapped, answered = hand_off(link, [1.0, 2.0, 3.0])
    fd, _ = shared_file([9.0] * 3)
    payload = json.dumps({{"t": "sync", "label": "step", "index": 0, "snapshot": True}}).encode()
    socket.send_fds(link._sock, [HEADER.pack(len(payload)) + payload], [fd])
    assert recv_exact(link._sock, 1) == b"k"
    return {REPORT}
""",
        layout=LAYOUT3,
    )
    assert out["observed"]["interfered"] is None
    assert out["observed"]["snapshots"] == [[1.0, 2.0, 3.0]]


def test_the_storage_is_spread_over_files_each_within_the_sandboxs_file_size_limit():
    """A memory file's size counts against RLIMIT_FSIZE (16 MiB in the sandbox): the child and the
    supervisor place the tensors in files of at most ``FILE_CAP`` from the layout alone."""
    from worker.harness import sharing

    mib = 1 << 20
    small = [{"shape": [16, 6], "dtype": "float64"}, {"shape": [16], "dtype": "float64"}]
    assert sharing.placement(small) == ([(0, 0), (0, 768)], [896])
    wide = [{"shape": [512, 512], "dtype": "float64"}, {"shape": [512], "dtype": "float64"}] * 12
    places, sizes = sharing.placement(wide)
    assert all(size <= sharing.FILE_CAP for size in sizes) and len(sizes) == 4
    assert places[:3] == [(0, 0), (0, 2 * mib), (0, 2 * mib + 4096)]
    huge = [{"shape": [3 * sharing.FILE_CAP // 8], "dtype": "float64"}, {"shape": [1], "dtype": "float64"}]
    cap = sharing.FILE_CAP  # a tensor larger spans consecutive files, each full but its last
    assert sharing.placement(huge) == ([(0, 0), (3, 0)], [cap, cap, cap, 8])
    spans = [{"shape": [3], "dtype": "float64"}, {"shape": [cap // 8 + 1], "dtype": "float64"}]
    spans += [{"shape": [2], "dtype": "float32"}]
    assert sharing.placement(spans) == ([(0, 0), (1, 0), (2, 64)], [24, cap, 72])
