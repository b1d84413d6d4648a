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
