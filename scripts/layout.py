"""docs/LAYOUT.md from the code: every package and module of tandem/ with the first sentence of its docstring,
in the order the audio flows. Rerun after moving or adding a module: python scripts/layout.py"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "tandem"
ORDER = ["audio", "listener", "think", "llm", "providers", "knowledge", "speak", "frontends", "turn", "record",
         "server", "web", "bench", "train", "runtime"]
TOP = ["cli.py", "commands.py", "runner.py"]


def first_sentence(path: Path, limit: int = 110) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    text = doc.strip().split("\n\n")[0].replace("\n", " ").split(". ")[0].rstrip(".")
    return text if len(text) <= limit else text[: limit - 1].rsplit(" ", 1)[0] + "…"


def main() -> None:
    lines = ["# The code, as the audio flows", "",
             "Made by `scripts/layout.py` from each package's and module's docstring (its first sentence). The",
             "user's audio comes in through `audio/` and `listener/`; `think/`, `llm/`, `providers/` and `knowledge/`",
             "make the oracles; `speak/` and `frontends/` make the assistant's audio; `turn/` holds one conversation",
             "together; `server/` serves many; `record/` and `bench/` measure; `train/` makes the compact front-end;",
             "`runtime/` keeps it all running on a small machine.", "", "```", "tandem/"]
    lines += [f"  {f:<28} {first_sentence(PKG / f)}" for f in TOP]
    for name in ORDER:
        pkg = PKG / name
        init = pkg / "__init__.py"
        lines.append(f"  {name + '/':<28} {first_sentence(init) if init.exists() else ''}".rstrip())
        for p in sorted(pkg.rglob("*.py")):
            if p == init:
                continue
            rel = f"{p.parent.relative_to(pkg)}/" if p.name == "__init__.py" else str(p.relative_to(pkg))
            lines.append(f"    {rel:<26} {first_sentence(p)}")
    lines.append("```")
    (ROOT / "docs" / "LAYOUT.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
