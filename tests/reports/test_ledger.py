"""The claim ledger gathers the chapters' verdicts: it must give each claim the verdict its chapter's
reader gives, from the stored runs, and hold every field the page prints."""
from pathlib import Path

import pytest

from capsedu.data.mnist import load_dataset
from capsedu.experiments.shared.runs import stored_or_preview
from capsedu.reports import ledger, two_digits
from capsedu.reports.routing import routing_report
from capsedu.reports.verdicts import CANNOT_TELL, FAILS, HOLDS

BOOK = Path(__file__).resolve().parents[2] / "book"


@pytest.fixture(scope="module")
def book_ledger():
    return ledger.claim_ledger(n_digits=100)     # chapter 3 on 100 digits: the rest is read, not computed


def test_every_claim_has_its_source_ours_a_budget_and_one_of_three_verdicts(book_ledger):
    entries = book_ledger.entries
    assert len(entries) >= 15 and [e.id for e in entries] == list(ledger.CLAIMS)
    for chapter in {e.chapter for e in entries}:               # the page links each chapter's notebook
        assert len(list(BOOK.glob(f"{int(chapter):02d}_*.ipynb"))) == 1, chapter
    for e in entries:
        assert e.whose and e.theirs and e.ours and e.budget, e
        assert e.verdict in (HOLDS, FAILS, CANNOT_TELL), e
        if e.comparison is not None and e.comparison.get("low") is not None:   # "cannot tell" says what it allows
            assert (e.verdict == CANNOT_TELL) == bool(e.allows), e


def test_the_verdicts_are_the_chapters_readers_verdicts(book_ledger):
    long = two_digits.two_digit_report("two_digits_long")
    control = two_digits.two_digit_report("two_digits_r1", control=True)
    chapter7 = two_digits.verdicts(long, control)
    stored, _ = stored_or_preview("compare_routing")
    chapter10 = routing_report(stored, load_dataset("mnist", source="sample", verbose=False)).verdicts
    for claim_id, (key, *_) in ledger.CLAIMS.items():
        chapter = claim_id.split(".")[0]
        if chapter == "7":
            assert book_ledger[claim_id].verdict == chapter7.verdict(key), claim_id
        if chapter == "10":
            assert book_ledger[claim_id].verdict == chapter10[key].verdict, claim_id


def test_chapter_3_coupling_stays_near_uniform_on_the_shipped_weights(book_ledger):
    assert 0.1 < book_ledger.max_c < 0.15       # the page's "0.105 against 0.100"
    assert book_ledger["3.1"].verdict == HOLDS   # a real departure from uniform ...
    assert book_ledger["3.2"].verdict == CANNOT_TELL   # ... that changes no classification we can detect
