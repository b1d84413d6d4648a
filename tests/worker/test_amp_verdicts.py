"""What amp-loop's verdicts say (issue 44): batches counted as learners count them, from 1, and
weights that went NaN said in words, not as a ratio (both languages)."""

from contracts.messages import render
from worker.checks import amp

PARAMS = {"overflow_batch": 2}  # the third batch, counted from 0 in the exercise's parameters


def shot(values, scale=1024.0):
    return {"params": values, "scale": scale}


def test_the_overflow_batch_is_named_as_a_learner_counts_it():
    mine = [shot([1.0]), shot([1.0]), shot([2.0]), shot([3.0], 512.0), shot([3.0], 512.0)]
    check = amp._overflow_check(PARAMS, mine)
    assert check.message == "check.overflow.applied" and check.values["batch"] == 3
    assert "Batch 3 had inf gradients" in render(check.message, "en", check.values)
    assert "O lote 3 teve gradientes inf" in render(check.message, "pt-BR", check.values)


def test_weights_that_went_nan_are_said_in_words_not_as_a_ratio():
    mine = [shot([0.0, 0.0]), shot([1.0, 1.0]), shot([None, 2.0]), shot([None, None])]
    errors = [0.0, 0.0, float("nan"), float("nan")]
    check = amp._trajectory_failed(mine, errors, 1e-4)
    assert check.message == "check.amp_trajectory.nan" and check.values["batch"] == 3
    en, pt = (render(check.message, lang, check.values) for lang in ("en", "pt-BR"))
    assert en.startswith("Your weights became NaN: before batch 3, 1 of their 2 numbers was NaN")
    assert pt.startswith("Seus pesos viraram NaN: antes do lote 3, 1 dos 2 números era NaN")
    for said in (en, pt):
        assert "NaN×" not in said


def test_a_path_left_is_numbered_from_one_and_the_end_is_the_last_batch():
    mine = [shot([0.0]), shot([1.0]), shot([2.5])]
    check = amp._trajectory_failed(mine, [0.0, 0.5, 1.0], 1e-4)
    assert check.message == "check.amp_trajectory.failed" and check.values["batch"] == 2
    assert "From batch 2 on" in render(check.message, "en", check.values)
    assert "A partir do lote 2" in render(check.message, "pt-BR", check.values)
    end = amp._trajectory_failed(mine, [0.0, 0.0, 0.7], 1e-4)
    assert end.message == "check.amp_trajectory.failed_end"
    assert render(end.message, "en", end.values).startswith("After the last batch, your weights are off")
    assert render(end.message, "pt-BR", end.values).startswith("Depois do último lote")


def test_a_batch_never_run_is_named_not_measured():
    check = amp._trajectory_failed([shot([0.0]), None, shot([1.0])], [0.0, float("inf"), 0.0], 1e-4)
    assert check.message == "check.amp_trajectory.unseen" and check.values["batch"] == 2
    assert "never ran the model on batch 2" in render(check.message, "en", check.values)
    assert "nunca rodou o modelo no lote 2" in render(check.message, "pt-BR", check.values)


def trace(forwards, final=(9.0, 64.0)):
    """A trace whose forwards are ``(batch, value, scale, grad, trained)``: the child's record
    and the supervisor's readings (the parameters, then the scale) agree."""
    told = [
        {"batch": b, "params": [v], "scale": s, "grad": g, "trained": t, "linear": {}}
        for b, v, s, g, t in forwards
    ]
    seen = {
        "events": [["forward", b, 0.0, k] for k, (b, *_) in enumerate(forwards)],
        "snapshots": [[v, s] for _, v, s, _, _ in forwards],
        "final_params": list(final),
    }
    return {"observed": seen, "snapshots": told, "final_params": [final[0]], "final_scale": final[1]}


def test_each_batch_is_read_at_the_forward_it_trained_on_not_at_a_look():
    # an evaluation at the starting weights first (no_grad), then the training; a loss logged
    # after each step under no_grad (a look at the next weights, the same batch)
    looks = [(0, 0.0, 1024.0, False, False), (1, 0.0, 1024.0, False, False)]
    training = [
        (0, 0.0, 1024.0, True, True),
        (0, 1.0, 2048.0, False, False),
        (1, 1.0, 2048.0, True, True),
        (1, 2.0, 4096.0, False, False),
    ]
    mine = amp._learner_snapshots(trace(looks + training), 2)
    assert [m["params"] for m in mine] == [[0.0], [1.0], [9.0]]
    assert [m["scale"] for m in mine] == [1024.0, 2048.0, 64.0]


def test_without_a_trained_forward_the_first_with_gradients_on_then_the_first_stands():
    forwards = [(0, 0.0, 1.0, False, False), (0, 5.0, 1.0, True, False), (1, 7.0, 1.0, False, False)]
    mine = amp._learner_snapshots(trace(forwards), 3)
    assert [m["params"] if m else None for m in mine] == [[5.0], [7.0], None, [9.0]]


def test_a_clip_on_scaled_gradients_on_the_instructor_s_path_claims_no_wrong_cut():
    data = {
        "events": [["scale"], ["C"], ["scaler.step"], ["update"]],
        "clips": [{"norm": 700.0, "unscaled": False, "scale": 1024.0, "batch": 0}],
        "linear_dtypes": {"float16": 2},
        "loss_dtypes": {"float32": 1},
        "loss_autocast": {"on": 1, "off": 0},
    }
    params = {"overflow_batch": 2, "amp_dtype": "float16", "max_norm": 0.8}
    ref = amp.Reference([], [], [0.7])
    on = amp.diagnose(params, ref, data, [], on_path=True)
    assert on.id == "clip-on-scaled-gradients" and on.values == {"batch": 1, "scale": 1024}
    for lang in ("en", "pt-BR"):
        said = render("diagnosis.clip-on-scaled-gradients.explanation", lang, on.values)
        assert "1" in said and ("1,024" in said or "1.024" in said)
        assert "too much" not in said and "demais" not in said
    off = amp.diagnose(params, ref, data, [], on_path=False)
    assert off.id == "clip-before-unscale"  # a clip that cut the wrong amount: said as before
