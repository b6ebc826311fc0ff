"""IDX (MNIST-format) byte sessions."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from flowsplit.data.idx import byte_stats, find_idx_pairs, read_idx, read_idx_set
from flowsplit.errors import InputError
from tests.conftest import USTC_DIR, needs_ustc


def _write_idx(path, arr, type_code=0x08):
    head = struct.pack(">HBB", 0, type_code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = head + arr.astype(">u1" if type_code == 0x08 else arr.dtype).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as fh:
        fh.write(data)


def test_reads_images_and_labels_gz_and_raw(tmp_path):
    images = np.arange(3 * 4 * 4, dtype=np.uint8).reshape(3, 4, 4)
    labels = np.array([2, 0, 1], dtype=np.uint8)
    _write_idx(tmp_path / "x-images-idx3-ubyte.gz", images)
    _write_idx(tmp_path / "x-labels-idx1-ubyte", labels)
    pairs = find_idx_pairs(sorted(tmp_path.iterdir()))
    s = read_idx_set(*pairs[0])
    np.testing.assert_array_equal(s.rows, images.reshape(3, 16))
    assert s.labels.tolist() == [2, 0, 1]
    assert s.class_names == ["class_0", "class_1", "class_2"]


def test_mismatched_counts_and_bad_magic_are_one_line_errors(tmp_path):
    _write_idx(tmp_path / "x-images-idx3-ubyte", np.zeros((3, 2, 2), np.uint8))
    _write_idx(tmp_path / "x-labels-idx1-ubyte", np.zeros(2, np.uint8))
    with pytest.raises(InputError, match="3 images but 2 labels"):
        read_idx_set(tmp_path / "x-images-idx3-ubyte", tmp_path / "x-labels-idx1-ubyte")
    (tmp_path / "bad-images-idx3-ubyte").write_bytes(b"hello world")
    with pytest.raises(InputError, match="not an IDX file"):
        read_idx(tmp_path / "bad-images-idx3-ubyte")
    _write_idx(tmp_path / "t-images-idx3-ubyte", np.zeros((3, 2, 2), np.uint8))
    data = (tmp_path / "t-images-idx3-ubyte").read_bytes()
    (tmp_path / "t-images-idx3-ubyte").write_bytes(data[:-3])
    with pytest.raises(InputError, match="truncated IDX data"):
        read_idx(tmp_path / "t-images-idx3-ubyte")


def test_images_without_labels_file_is_reported(tmp_path):
    _write_idx(tmp_path / "x-images-idx3-ubyte", np.zeros((1, 2, 2), np.uint8))
    with pytest.raises(InputError, match="no matching labels file"):
        find_idx_pairs([tmp_path / "x-images-idx3-ubyte"])


def test_byte_stats_on_a_hand_made_row():
    row = np.zeros((1, 32), np.uint8)
    row[0, :4] = [ord("G"), ord("E"), ord("T"), 200]
    st = byte_stats(row)[0]
    assert st[0] == 4  # payload length before the zero padding
    assert st[1] == 28  # zero bytes
    assert st[5] == pytest.approx(3 / 32)  # printable share: G, E, T
    assert st[7] == pytest.approx(1 / 32)  # bytes >= 128
    # histogram bins of 16 values: 28 zeros + 'E','G' in bin 4, 'T' in bin 5, 200 in bin 12
    hist = st[8:24] * 32
    assert hist[0] == 28 and hist[4] == 2 and hist[5] == 1 and hist[12] == 1
    assert st[24:28].tolist() == [71, 69, 84, 200]


@needs_ustc
def test_ustc_set_gets_its_published_class_names():
    s = read_idx_set(
        USTC_DIR / "20class_SessionL7_t10k-images-idx3-ubyte.gz",
        USTC_DIR / "20class_SessionL7_t10k-labels-idx1-ubyte.gz",
    )
    assert s.rows.shape == (13325, 784)
    assert s.class_names[0] == "BitTorrent" and s.class_names[19] == "Zeus"
