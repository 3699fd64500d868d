"""Write a small image folder for README's "Your own images": 12 grey 28x28 PNGs of circles and 12 of
squares, each of its own size and place, one subfolder per class (the layout data=image_folder reads).

    python docs/examples/shapes.py imgs
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

from PIL import Image, ImageDraw

SIZE, PER_CLASS = 28, 12


def draw(shape: str, rng: random.Random) -> Image.Image:
    """One white ``shape`` (circle or square) of random size and position on a black square."""
    image = Image.new("L", (SIZE, SIZE), 0)
    side = rng.randint(8, 18)
    left, top = rng.randint(1, SIZE - side - 1), rng.randint(1, SIZE - side - 1)
    box = (left, top, left + side, top + side)
    pen = ImageDraw.Draw(image)
    (pen.ellipse if shape == "circle" else pen.rectangle)(box, fill=rng.randint(160, 255))
    return image


def main(folder: Path) -> None:
    rng = random.Random(0)
    for shape in ("circle", "square"):
        (folder / shape).mkdir(parents=True, exist_ok=True)
        for i in range(PER_CLASS):
            draw(shape, rng).save(folder / shape / f"{i}.png")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "imgs"))
