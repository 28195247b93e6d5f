"""docs/DESIGN.md's turn diagram and table from the machine's own table (tandem/turn/machine.py), between its
`turn-table` markers. Rerun after changing a transition: python scripts/turn_table.py"""
from pathlib import Path

from tandem.turn.machine import as_markdown

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "DESIGN.md"
BEGIN, END = "<!-- turn-table: made by scripts/turn_table.py -->\n", "<!-- /turn-table -->\n"


def main() -> None:
    text = DESIGN.read_text()
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    DESIGN.write_text(head + BEGIN + as_markdown() + END + tail)


if __name__ == "__main__":
    main()
