"""Classes as a service: codes, joining, leaving, removing, and the report's counts, on SQLite and
on PostgreSQL."""

import pytest

from app.classes import service
from app.classes.models import Role
from app.submissions.models import Mode, Status
from tests.classes.conftest import EXERCISE, MISTAKE, account, answered, graded

QUESTION = ("gradient-accumulation", "when-to-step")


def test_a_class_has_its_creator_as_teacher_and_codes_that_open_it(session):
    ana = account(session, "ana@example.com")
    classroom = service.create(session, ana, "  Deep learning 2026 ", "MO434")
    assert (classroom.name, classroom.course) == ("Deep learning 2026", "MO434")
    assert service.taught(session, classroom.id, ana) == classroom
    assert service.by_code(session, classroom.join_code) == (classroom, Role.LEARNER)
    assert service.by_code(session, classroom.teacher_code.lower()) == (classroom, Role.TEACHER)
    spaced = f"{classroom.join_code[:5]}-{classroom.join_code[5:]}"
    assert service.by_code(session, spaced) == (classroom, Role.LEARNER)  # as typed by hand
    assert service.by_code(session, "NOPE") is None
    assert service.by_code(session, " ") is None


def test_renewed_codes_end_the_old_links_and_keep_the_members(session):
    ana, bia = account(session, "ana@example.com"), account(session, "bia@example.com")
    classroom = service.create(session, ana, "A")
    old = classroom.join_code
    service.join(session, bia, old)
    service.renew_codes(session, classroom)
    assert classroom.join_code != old
    assert service.by_code(session, old) is None
    assert service.membership(session, classroom.id, bia) is not None
    with pytest.raises(service.NotFound):
        service.join(session, account(session, "caio@example.com"), old)


def test_joining_twice_changes_nothing_and_a_teachers_code_makes_a_teacher(session):
    ana, bia, caio = (account(session, f"{n}@example.com") for n in ("ana", "bia", "caio"))
    classroom = service.create(session, ana, "A")
    _, first = service.join(session, bia, classroom.join_code, "Bia S.")
    _, again = service.join(session, bia, classroom.join_code)
    assert first.id == again.id and again.name == "Bia S." and again.role == Role.LEARNER
    _, member = service.join(session, caio, classroom.join_code)
    assert member.name == "caio"  # the address's first part until they choose
    assert service.taught(session, classroom.id, caio) is None
    service.join(session, caio, classroom.teacher_code)
    assert service.taught(session, classroom.id, caio) == classroom
    _, teacher = service.join(session, ana, classroom.join_code)  # a teacher stays a teacher
    assert teacher.role == Role.TEACHER


def test_the_last_teacher_cannot_leave_a_learner_can_and_a_teacher_removes_learners(session):
    ana, bia, caio, duda = (account(session, f"{n}@example.com") for n in ("ana", "bia", "caio", "duda"))
    classroom = service.create(session, ana, "A")
    with pytest.raises(service.LastTeacher):
        service.leave(session, classroom.id, ana)
    service.join(session, bia, classroom.join_code)
    service.join(session, caio, classroom.join_code)
    service.join(session, duda, classroom.teacher_code)
    assert service.leave(session, classroom.id, bia)
    assert not service.leave(session, classroom.id, bia)
    assert service.remove(session, classroom, caio.id)
    assert not service.remove(session, classroom, duda.id)  # a teacher is not removed as a learner
    assert service.leave(session, classroom.id, ana)  # another teacher is left
    assert service.taught(session, classroom.id, ana) is None
    assert [m.user_id for m in service.teachers(session, classroom.id)] == [duda.id]


def test_the_report_counts_passes_named_mistakes_and_wrong_options_of_members_only(session, _course):
    teacher = account(session, "t@example.com")
    classroom = service.create(session, teacher, "A")
    passes, first, second, outsider, idle = (
        account(session, f"{n}@example.com") for n in ("passes", "first", "second", "outsider", "idle")
    )
    for user in (passes, first, second, idle):
        service.join(session, user, classroom.join_code)
    graded(session, passes, Status.FAILED, "wrong-scale")
    graded(session, passes, Status.PASSED)
    graded(session, passes, Status.PASSED, mode=Mode.RUN, exercise="gradient-accumulation/remainder")
    graded(session, first, Status.FAILED, MISTAKE, lang="pt-BR")
    graded(session, first, Status.FAILED, MISTAKE, lang="pt-BR")  # the same learner: counted once
    graded(session, second, Status.FAILED, MISTAKE)
    graded(session, second, Status.QUEUED)
    graded(session, outsider, Status.FAILED, MISTAKE)  # not in the class: never counted
    answered(session, first, *QUESTION, "after-each", False)
    answered(session, second, *QUESTION, "after-each", False)
    answered(session, second, *QUESTION, "after-each", False)
    answered(session, passes, *QUESTION, "start-of-cycle", False)
    answered(session, outsider, *QUESTION, "start-of-cycle", False)

    report = service.report(session, classroom, _course)

    by_name = {row.name: row for row in report.learners}
    assert list(by_name) == ["first", "idle", "passes", "second"]  # the teacher is no learner
    cell = by_name["passes"].cells[EXERCISE]
    assert (cell.status, cell.attempts) == ("passed", 2) and by_name["passes"].last is not None
    assert (by_name["first"].cells[EXERCISE].status, by_name["first"].cells[EXERCISE].attempts) == (
        "tried",
        2,
    )
    assert by_name["second"].cells[EXERCISE].attempts == 2  # the one waiting holds a number
    assert by_name["passes"].cells["gradient-accumulation/remainder"].status == "tried"  # a run: no attempt
    assert by_name["passes"].cells["gradient-accumulation/remainder"].attempts == 0
    assert by_name["idle"].cells[EXERCISE].status == "not-started" and by_name["idle"].last is None
    row = report.exercises[EXERCISE]
    assert (row.passed, row.attempted) == (1, 3)
    assert [(m.id, m.learners) for m in row.mistakes] == [(MISTAKE, 2), ("wrong-scale", 1)]
    example = row.mistakes[0].example
    assert example is not None and example.user_id in (first.id, second.id)
    assert report.questions["gradient-accumulation/when-to-step"] == {"after-each": 2, "start-of-cycle": 1}
    assert set(report.questions) == {f"{lsn.slug}/{q.id}" for lsn in _course.lessons for q in lsn.questions}

    service.leave(session, classroom.id, first)
    after = service.report(session, classroom, _course)
    assert [m.learners for m in after.exercises[EXERCISE].mistakes] == [1, 1]
    assert "first" not in {row.name for row in after.learners}
    assert after.questions["gradient-accumulation/when-to-step"] == {"after-each": 1, "start-of-cycle": 1}


def test_the_stamp_changes_with_every_kind_of_news_and_only_then(session):
    teacher, bia = account(session, "t@example.com"), account(session, "bia@example.com")
    outsider = account(session, "o@example.com")
    classroom = service.create(session, teacher, "A")
    stamps = [service.stamp(session, classroom.id)]

    def news() -> None:
        stamps.append(service.stamp(session, classroom.id))
        assert stamps[-1] != stamps[-2]

    service.join(session, bia, classroom.join_code)
    news()
    submission = graded(session, bia, Status.QUEUED)
    news()
    submission.status = Status.FAILED
    session.flush()
    news()
    answered(session, bia, *QUESTION, "after-each", False)
    news()
    graded(session, outsider, Status.FAILED, MISTAKE)
    assert service.stamp(session, classroom.id) == stamps[-1]  # not the class's news
    service.leave(session, classroom.id, bia)
    news()


def test_the_report_makes_as_many_queries_for_a_large_class_as_for_a_small_one(session, _course):
    from sqlalchemy import event

    def queries_for(learners: int) -> int:
        teacher = account(session, f"t{learners}@example.com")
        classroom = service.create(session, teacher, "A")
        for i in range(learners):
            user = account(session, f"l{learners}-{i}@example.com")
            service.join(session, user, classroom.join_code)
            graded(session, user, Status.FAILED, MISTAKE)
            graded(session, user, Status.PASSED, exercise="gradient-accumulation/remainder")
            answered(session, user, *QUESTION, "after-each", False)
        count = 0

        def counted(*_args) -> None:
            nonlocal count
            count += 1

        engine = session.get_bind()
        event.listen(engine, "before_cursor_execute", counted)
        try:
            report = service.report(session, classroom, _course)
        finally:
            event.remove(engine, "before_cursor_execute", counted)
        assert len(report.learners) == learners
        assert report.exercises[EXERCISE].mistakes[0].learners == learners
        return count

    assert queries_for(2) == queries_for(25)
