"""fold: printed text folded to the book's column, nothing lost, short lines untouched; noted_table:
the last column becomes numbered notes under the table."""
import re

from capsedu.figures.tables import COLUMN, fold, noted_table


def test_long_lines_fold_at_spaces_and_keep_every_word():
    line = "  stored run: " + " ".join(f"word{i}" for i in range(40))
    short = "a short line"
    folded = fold(f"{line}\n{short}", width=40).split("\n")
    assert all(len(piece) <= 40 for piece in folded)
    assert folded[-1] == short
    assert folded[0].startswith("  stored run:") and all(p.startswith("    ") for p in folded[1:-1])
    assert " ".join(p.strip() for p in folded[:-1]).split() == line.split()


def test_a_word_wider_than_the_column_stays_whole():
    path = "/" + "x" * (COLUMN + 5)
    assert fold(f"out {path} done") == f"out\n  {path}\n  done"


def test_noted_table_moves_the_last_column_under_the_table_numbered_by_row():
    rows = [["a", "holds", "the <interval> clears zero"], ["b", "cannot tell", ""],
            ["c", "does not hold", "McNemar agrees"]]
    html = noted_table(["claim", "verdict", "why"], rows)
    table, notes = html.split("</table>")
    assert "<th>why</th>" not in table and table.count("<tr>") == 4
    cells = re.findall(r"<td>(.*?)</td>", table)
    assert cells == ["a", "holds [1]", "b", "cannot tell", "c", "does not hold [3]"]
    assert re.findall(r'<li value="(\d)"><small>(.*?)</small>', notes) == [
        ("1", "the &lt;interval&gt; clears zero"), ("3", "McNemar agrees")]
    assert noted_table(["claim", "why"], [["a", ""]]).endswith("</table>")
