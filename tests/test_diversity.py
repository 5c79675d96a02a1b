"""rlib.diversity: distinct-2, the book's measure of a looping generation."""

from rlib.diversity import distinct_2


def test_distinct_2_counts_distinct_bigrams_over_bigrams():
    assert distinct_2([1, 2, 3, 4]) == 1.0
    assert distinct_2([1, 2, 1, 2, 1, 2]) == 2 / 5  # (1,2) and (2,1) over 5 bigrams
    assert distinct_2([7] * 11) == 1 / 10  # one token repeated: a single bigram
    assert distinct_2([5]) == 1.0 and distinct_2([]) == 1.0
    assert distinct_2((3, 1, 3, 1)) == 2 / 3  # tuples too (a Request's reference)
