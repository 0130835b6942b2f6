"""Checks a PNG written by shardtrain with Pillow, an independent decoder.

Usage: check_png.py FILE.png [WIDTH HEIGHT]   (no size given: any size is accepted)
Exits 0 when the file verifies (chunk CRCs, zlib stream), decodes to WIDTH x HEIGHT RGB, and is
not a single flat colour; prints why and exits 1 otherwise.
"""
import sys

from PIL import Image


def main():
    path = sys.argv[1]
    width, height = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (None, None)
    with Image.open(path) as im:
        if im.format != "PNG":
            sys.exit(f"{path}: Pillow reads it as {im.format}, not PNG")
        im.verify()  # checks chunk CRCs without decoding
    with Image.open(path) as im:  # verify() leaves the image unusable, so reopen to decode
        im.load()
        if width is None:
            width, height = im.size
        if im.size != (width, height):
            sys.exit(f"{path}: size {im.size}, expected {(width, height)}")
        if im.mode != "RGB":
            sys.exit(f"{path}: mode {im.mode}, expected RGB")
        colours = im.getcolors(maxcolors=1 << 16)
        if colours is not None and len(colours) < 2:
            sys.exit(f"{path}: a single flat colour {colours[0][1]}")
        count = "more than 65536" if colours is None else len(colours)
    print(f"{path}: valid PNG, {width}x{height} RGB, {count} colours")


if __name__ == "__main__":
    main()
