from pathlib import Path

try:
    text = Path("result.txt").read_text().strip()
except OSError:
    text = ""
print(1 if text == "solved" else 0)
