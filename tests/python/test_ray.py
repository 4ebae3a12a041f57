"""stoker.ray (issue 40) on a real local Ray cluster: a head without CPUs and two worker nodes
(each its own raylet and worker processes, all on loopback). Ray Data reads every sample of
column and file datasets, writes one version from many write tasks, keeps that true when a
worker dies mid-write and Ray retries its task, refuses what it must (schemas that disagree,
an existing dataset without append), and Ray actors run feeders whose batches are the
trainer's own."""
from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pytest

# Every Ray process on loopback only (tests use no other address): Ray otherwise binds the
# machine's address, and this is how its own tests keep a cluster local.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402

import stoker  # noqa: E402
import stoker.ray  # noqa: E402
from conftest import s3_skip  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    workers = [c.add_node(num_cpus=1, node_ip_address="127.0.0.1") for _ in range(2)]
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    # Test classes below run on the workers, which cannot import this module.
    ray.cloudpickle.register_pickle_by_value(__import__(__name__))
    yield c, workers
    ray.shutdown()
    c.shutdown()


def jpeg(i: int) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8 + i % 5, 8), (i % 256, 3, 7)).save(buf, "JPEG")
    return buf.getvalue()


def column_samples(n: int) -> list[dict]:
    rng = np.random.default_rng(4)
    return [{"id": i, "score": float(i) / 3, "caption": f"sample {i}" if i % 4 else None,
             "meta": {"i": i, "tags": ["a"] * (i % 3)}, "image": jpeg(i),
             "tokens": rng.integers(0, 50000, size=i % 9, dtype=np.uint16),
             "emb": rng.standard_normal((2, 3)).astype(np.float32)} for i in range(n)]


COLUMNS = {"id": "int", "score": "float", "caption": "str?", "meta": "json", "image": "jpeg",
           "tokens": "tokens:uint16", "emb": "ndarray:float32:2x3"}


def test_read_gives_every_sample_of_a_column_dataset(cluster, tmp_path):
    uri = str(tmp_path / "cols.stoker")
    want = column_samples(300)
    with stoker.Writer(uri, columns=COLUMNS, chunk_size="8KiB") as w:
        for s in want:
            w.write(s)
    ds = stoker.Dataset(uri)
    assert ds.num_chunks >= 4
    data = stoker.ray.read(uri, override_num_blocks=4)
    assert data.count() == 300
    schema = data.schema()
    assert dict(zip(schema.names, map(str, schema.types)))["id"] == "int64"
    rows = sorted(data.take_all(), key=lambda r: r["id"])
    for got, exp in zip(rows, want, strict=True):
        assert got["score"] == exp["score"] and got["caption"] == exp["caption"]
        assert json.loads(got["meta"]) == exp["meta"]
        assert got["image"] == exp["image"]
        assert np.array_equal(np.asarray(got["tokens"], dtype=np.uint16), exp["tokens"])
        assert np.array_equal(got["emb"], exp["emb"])
    # Each chunk is read whole by one task: a task's rows are runs of whole chunks, each in
    # index order.
    chunk_of = np.asarray(stoker._core.sample_chunks(ds))
    runs = []
    for block in ray.get(data.to_arrow_refs()):
        ids = block.column("id").to_pylist()
        for i, sample in enumerate(ids):
            if i == 0 or chunk_of[sample] != chunk_of[ids[i - 1]]:
                runs.append([])
            runs[-1].append(sample)
    assert len(runs) == ds.num_chunks
    for run in runs:
        assert run == sorted(np.flatnonzero(chunk_of == chunk_of[run[0]]).tolist())
    assert stoker.ray.read(uri, columns=["id", "image"]).schema().names == ["id", "image"]
    assert stoker.ray.read(uri, columns="id").schema().names == ["id"]  # one, as Ray takes it
    with pytest.raises(ValueError, match="nope"):
        stoker.ray.read(uri, columns=["nope"])


def test_read_converts_only_the_columns_asked_for(cluster, tmp_path):
    """columns= is a projection in the read tasks: a column left out is never converted, so
    its null in a tensor column (which Ray cannot hold) does not fail the read."""
    uri = str(tmp_path / "nulls.stoker")
    with stoker.Writer(uri, columns={"id": "int", "emb": "ndarray:float32:4?"}) as w:
        for i in range(10):
            w.write({"id": i, "emb": None if i == 3 else np.zeros(4, np.float32)})
    with pytest.raises(Exception, match="column 'emb'"):
        stoker.ray.read(uri).take_all()
    assert sorted(r["id"] for r in stoker.ray.read(uri, columns=["id"]).take_all()) == \
        list(range(10))
    with pytest.raises(ValueError, match="versions count from 1"):
        stoker.ray.read(uri, version=-1)


def test_read_file_dataset_and_torch_batches(cluster, tmp_path):
    src = tmp_path / "tree"
    files = {}
    for i in range(40):
        files[f"c{i % 4}/f{i:02d}.jpg"] = jpeg(i)
        (src / f"c{i % 4}").mkdir(parents=True, exist_ok=True)
        (src / f"c{i % 4}/f{i:02d}.jpg").write_bytes(files[f"c{i % 4}/f{i:02d}.jpg"])
    uri = str(tmp_path / "files.stoker")
    stoker.pack(str(src), uri, progress=False)
    rows = stoker.ray.read(uri).take_all()
    assert {r["path"]: r["data"] for r in rows} == files
    assert all(r["label"] == int(r["path"][1]) for r in rows)
    labels = [b["label"] for b in stoker.ray.read(uri, columns=["label"]).iter_torch_batches(
        batch_size=16)]
    assert sum(len(t) for t in labels) == 40 and str(labels[0].dtype) == "torch.int64"


def pil_resized(data: bytes, size: tuple[int, int]) -> np.ndarray:
    """What ray.data.read_images(size=(h, w), mode="RGB") makes of a file: PIL's bilinear."""
    from PIL import Image
    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(im.convert("RGB").resize(size[::-1], resample=Image.BILINEAR))


def test_read_images_decodes_in_the_read_tasks(cluster, tmp_path):
    from test_image_loader import write_photo_tree
    files = write_photo_tree(tmp_path / "src", 30, extra={"c1/broken.jpg": b"\xff\xd8 not a jpeg",
                                                          "c2/README.txt": b"no image at all"})
    uri = str(tmp_path / "photos.stoker")
    stoker.pack(str(tmp_path / "src"), uri, progress=False, chunk_size="64KiB")
    assert stoker.Dataset(uri).num_chunks >= 3
    # Ray's read_images(size=...) geometry, stoker's decoder: PIL's pixels exactly (with DCT
    # scaling off, which would decode a photo shrunk by 2x or more at a smaller scale first).
    data = stoker.ray.read_images(uri, size=(40, 56), center_crop=False, include_paths=True,
                                  on_error="skip", dct_scaling=False)
    rows = data.take_all()  # broken.jpg left out (a warning in its read task's log)
    images = sorted(p for p in files if "broken" not in p and "README" not in p)
    assert sorted(r["path"] for r in rows) == images  # the README is no image: left out
    assert data.count() == len(images)
    for r in rows:
        assert r["image"].shape == (40, 56, 3) and r["image"].dtype == np.uint8
        assert np.array_equal(r["image"], pil_resized(files[r["path"]], (40, 56))), r["path"]
        assert r["label"] == int(r["path"][1])
    with pytest.raises(Exception, match=r"sample \d+ \(c1/broken\.jpg\) cannot be decoded"):
        stoker.ray.read_images(uri).take_all()
    # train=True: each sample's crop and flip from (seed, its index), as stoker.ImageLoader's
    # first epoch draws them; seed=None draws anew on every pass.
    ok = stoker.Dataset(uri).filter({"path": lambda p: "broken" not in p})
    loader = stoker.ImageLoader(ok, batch_size=64, train=True, seed=7, size=48, dtype="uint8",
                                layout="NHWC", shuffle="sequential")
    want = np.concatenate([batch.numpy() for batch, _ in loader])
    trained = stoker.ray.read_images(uri, train=True, seed=7, size=48, on_error="skip")
    got = [r["image"] for r in trained.take_all()]
    assert sorted(map(bytes, got)) == sorted(map(bytes, want))
    # A view reads its samples only (here without the broken file: on_error is not needed).
    assert sorted(bytes(r["image"]) for r in stoker.ray.read_images(
        ok, train=True, seed=7, size=48).take_all()) == sorted(map(bytes, want))
    with pytest.raises(ValueError, match="seed"):
        stoker.ray.read_images(uri, seed=-1)
    fresh = stoker.ray.read_images(uri, train=True, size=48, on_error="skip")
    first, second = (sorted(bytes(r["image"]) for r in fresh.take_all()) for _ in range(2))
    assert first != second
    # Normalized float32 NCHW batches straight into torch.
    batch = next(iter(stoker.ray.read_images(uri, dtype="float32", layout="NCHW", size=32,
                                             on_error="skip").iter_torch_batches(batch_size=8)))
    assert tuple(batch["image"].shape) == (8, 3, 32, 32)
    assert str(batch["image"].dtype) == "torch.float32"


def gradient(i: int, fmt: str = "JPEG") -> bytes:
    """An image whose pixels differ across it, so that a wrong crop or resize shows."""
    from PIL import Image
    x = np.arange(40 + i, dtype=np.uint8)
    y = np.arange(30, dtype=np.uint8)[:, None]
    pixels = np.stack([np.broadcast_to(x * 5 + i, (30, 40 + i)),
                       np.broadcast_to(y * 7, (30, 40 + i)),
                       ((x[None, :] + y) * 3).astype(np.uint8)], axis=-1)
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(buf, fmt)
    return buf.getvalue()


def test_read_images_edge_cases(cluster, tmp_path):
    """A chunk whose every image is skipped gives no block (not a crash over its other columns'
    arrays); a name that is not UTF-8 reads with its bytes escaped; bytes columns that hold
    images are named when no jpeg/png column is; threads beyond any node's CPUs are refused
    rather than waiting for ever."""
    uri = str(tmp_path / "skipped.stoker")
    with stoker.Writer(uri, columns={"img": "jpeg?", "emb": "ndarray:float32:3"}) as w:
        for i in range(8):
            w.write({"img": jpeg(i) if i >= 4 else None, "emb": np.full(3, i, np.float32)})
    with stoker.Writer(str(tmp_path / "none.stoker"),
                       columns={"img": "jpeg?", "emb": "ndarray:float32:3"}) as w:
        for i in range(4):
            w.write({"img": None, "emb": np.zeros(3, np.float32)})
    assert stoker.ray.read_images(str(tmp_path / "none.stoker"), size=4,
                                  on_error="skip").take_all() == []
    rows = stoker.ray.read_images(uri, size=4, on_error="skip").take_all()
    assert sorted(int(r["emb"][0]) for r in rows) == [4, 5, 6, 7]

    (tmp_path / "tree" / "cat").mkdir(parents=True)
    (tmp_path / "tree" / "cat" / "ok.jpg").write_bytes(jpeg(1))
    (tmp_path / "tree" / "cat").joinpath(os.fsdecode(b"bad\xff.jpg")).write_bytes(jpeg(2))
    names = str(tmp_path / "names.stoker")
    stoker.pack(str(tmp_path / "tree"), names, progress=False)
    assert sorted(r["path"] for r in stoker.ray.read(names).take_all()) == \
        ["cat/bad\\xff.jpg", "cat/ok.jpg"]
    assert sorted(r["path"] for r in stoker.ray.read_images(
        names, size=4, include_paths=True).take_all()) == ["cat/bad\\xff.jpg", "cat/ok.jpg"]

    raw = str(tmp_path / "raw.stoker")
    with stoker.Writer(raw, columns={"pic": "bytes", "n": "int"}) as w:
        w.write({"pic": jpeg(0), "n": 0})
    with pytest.raises(ValueError, match="if bytes column 'pic' holds images, say column='pic'"):
        stoker.ray.read_images(raw, size=4)
    assert len(stoker.ray.read_images(raw, column="pic", size=4).take_all()) == 1
    with pytest.raises(ValueError, match="no node of this cluster has more than 1"):
        stoker.ray.read_images(uri, size=4, threads=2)


def test_read_images_of_a_column_dataset_keeps_its_other_columns(cluster, tmp_path):
    uri = str(tmp_path / "cols.stoker")
    with stoker.Writer(uri, columns={"image": "jpeg?", "caption": "str", "label": "int"}) as w:
        for i in range(20):
            w.write({"image": gradient(i) if i != 13 else None, "caption": f"a photo {i}",
                     "label": i % 3})
    rows = sorted(stoker.ray.read_images(uri, size=(12, 16), center_crop=False,
                                         dct_scaling=False, on_error="skip").take_all(),
                  key=lambda r: r["caption"])
    assert [r["caption"] for r in rows] == sorted(f"a photo {i}" for i in range(20) if i != 13)
    for r in rows:
        i = int(r["caption"].split()[-1])
        assert r["label"] == i % 3
        assert np.array_equal(r["image"], pil_resized(gradient(i), (12, 16)))
    with pytest.raises(Exception, match=r"sample 13 has no 'image'"):
        stoker.ray.read_images(uri).take_all()
    with pytest.raises(TypeError, match="sizes"):
        stoker.ray.read_images(uri, sizes=8)
    with pytest.raises(ValueError, match="caption.*str, not encoded images"):
        stoker.ray.read_images(uri, column="caption")
    with pytest.raises(ValueError, match="on_error"):
        stoker.ray.read_images(uri, on_error="ignore")


def test_read_images_of_tar_shards_picks_the_image_member(cluster, tmp_path):
    from conftest import write_tar
    write_tar(tmp_path / "0.tar", {"s/a.png": gradient(1, "PNG"), "s/a.cls": b"3",
                                   "s/b.cls": b"1", "s/b.jpeg": gradient(2),
                                   "s/c.cls": b"2", "s/c.left.jpg": gradient(3)})
    uri = str(tmp_path / "shards.stoker")
    stoker.pack([str(tmp_path / "0.tar")], uri, progress=False)
    data = stoker.ray.read_images(uri, size=(12, 16), center_crop=False, dct_scaling=False,
                                  include_paths=True)
    rows = {r["path"]: r for r in data.take_all()}
    assert sorted(rows) == ["s/a", "s/b", "s/c"] and rows["s/a"]["label"] == 3
    assert data.count() == 3
    for key, image in (("s/a", gradient(1, "PNG")), ("s/b", gradient(2)), ("s/c", gradient(3))):
        assert np.array_equal(rows[key]["image"], pil_resized(image, (12, 16))), key
    with pytest.raises(Exception, match=r"sample \d+ \(s/b\) has no 'png'"):
        stoker.ray.read_images(uri, column="png").take_all()


def test_a_write_is_one_version_holding_every_row_once(cluster, tmp_path):
    uri = str(tmp_path / "out.stoker")
    data = ray.data.range(1000, override_num_blocks=8).map(
        lambda r: {"id": r["id"], "text": f"row {r['id']}", "vec": np.full(4, r["id"], np.float32)})
    sink = stoker.ray.Datasink(uri, columns={"id": "int"})
    data.write_datasink(sink)
    assert sink.summary["version"] == 1 and sink.summary["samples"] == 1000
    ds = stoker.Dataset(uri)
    assert ds.columns == {"id": "int", "text": "str?", "vec": "ndarray:float32:4?"}
    ids = [ds[i]["id"] for i in range(len(ds))]
    assert ids == list(range(1000))  # the tasks' rows in task order
    assert ds[7]["text"] == "row 7" and np.array_equal(ds[7]["vec"], np.full(4, 7, np.float32))
    assert [p.name for p in (Path(uri) / "parts").iterdir()][0].startswith("ray-")
    # No dataset is overwritten by accident; append adds a version.
    with pytest.raises(FileExistsError, match="append=True"):
        data.write_datasink(stoker.ray.Datasink(uri))
    data.limit(10).write_datasink(stoker.ray.Datasink(uri, columns={"id": "int"}, append=True))
    assert stoker.Dataset(uri).version == 2 and len(stoker.Dataset(uri)) == 1010


class DiesOnce(stoker.ray.Datasink):
    """Writes its part, then kills its worker process before Ray hears of it: the first time
    task 1 runs only."""

    def __init__(self, path, marker, **kw):
        super().__init__(path, **kw)
        self.marker = marker

    def write(self, blocks, ctx):
        result = super().write(blocks, ctx)
        if ctx.task_idx == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return result


def test_a_task_retried_after_its_worker_died_leaves_no_duplicate(cluster, tmp_path):
    uri, marker = str(tmp_path / "retry.stoker"), str(tmp_path / "died")
    data = ray.data.range(400, override_num_blocks=4).map(lambda r: {"id": r["id"]})
    data.write_datasink(DiesOnce(uri, marker, columns={"id": "int"}))
    assert os.path.exists(marker)  # the worker did die
    ds = stoker.Dataset(uri)
    assert ds.version == 1
    assert sorted(ds[i]["id"] for i in range(len(ds))) == list(range(400))
    jobs = list((Path(uri) / "parts").iterdir())
    assert [p.name for p in jobs[0].iterdir()] == ["closed"]  # the died attempt's part is gone


def test_an_empty_write_after_a_filter_publishes_nothing(cluster, tmp_path):
    uri = str(tmp_path / "empty.stoker")
    sink = stoker.ray.Datasink(uri)
    ray.data.range(10, override_num_blocks=2).filter(lambda r: r["id"] > 100).write_datasink(sink)
    assert sink.summary is None
    assert not (Path(uri) / "versions").exists()


def test_tasks_whose_schemas_disagree_are_refused_naming_both(cluster, tmp_path):
    uri = str(tmp_path / "mixed.stoker")

    def shape(batch):
        if batch["id"][0] >= 50:  # the second task's rows have their ids as text
            return {"id": [str(v) for v in batch["id"]]}
        return batch

    data = ray.data.range(100, override_num_blocks=2).map_batches(shape, batch_size=None)
    with pytest.raises(Exception, match=r"task 0 .*id:int\?.* task 1 .*id:str\?"):
        data.write_datasink(stoker.ray.Datasink(uri))
    assert not (Path(uri) / "versions").exists()
    job = next((Path(uri) / "parts").iterdir())
    assert [p.name for p in job.iterdir()] == ["closed"]  # discarded
    # A column with only nulls in one task's rows: the message says why the types differ.
    rows = [{"x": 1, "n": None}, {"x": 2, "n": None}, {"x": 3, "n": 7}, {"x": 4, "n": 8}]
    with pytest.raises(Exception, match=r"'n' held only nulls in one task's rows"):
        ray.data.from_items(rows, override_num_blocks=2).write_datasink(
            stoker.ray.Datasink(str(tmp_path / "nulls.stoker")))
    sink = stoker.ray.Datasink(str(tmp_path / "typed.stoker"), columns={"n": "int?"})
    ray.data.from_items(rows, override_num_blocks=2).write_datasink(sink)
    assert sorted(r["n"] or 0 for r in stoker.ray.read(str(tmp_path / "typed.stoker"))
                  .take_all()) == [0, 0, 7, 8]
    # A bad value: which task, and that the row is counted within the task.
    bad = [{"v": jpeg(i)} for i in range(5)] + [{"v": b"not a jpeg"}]
    with pytest.raises(Exception, match=r"write task 0, its row 5 \(counted from the task's"):
        ray.data.from_items(bad, override_num_blocks=1).write_datasink(
            stoker.ray.Datasink(str(tmp_path / "bad.stoker"), columns={"v": "jpeg?"}))


def test_feeders_as_ray_actors_make_the_trainers_batches(cluster, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from test_feeders import passes
    from test_image_loader import write_photo_tree
    write_photo_tree(tmp_path / "src", 90)  # enough batches that feeders get slices under load
    uri = str(tmp_path / "photos.stoker")
    stoker.pack(str(tmp_path / "src"), uri, progress=False)
    secret = tmp_path / "job.secret"
    secret.write_bytes(b"a secret for the ray feeders test\n")
    secret.chmod(0o600)
    monkeypatch.setenv("STOKER_SECRET_FILE", str(secret))
    local, _, _ = passes(uri)
    announce = tmp_path / "feeders.txt"
    with stoker.ray.start_feeders(2, job="raytest", announce=announce) as feeders:
        assert sorted(announce.read_text().split()) == sorted(feeders.addresses)
        fed, stats, _ = passes(uri, feeders=str(announce))
    assert len(fed) == len(local)
    for (gi, gl), (wi, wl) in zip(fed, local):
        assert np.array_equal(gi, wi) and np.array_equal(gl, wl)
    made = {f["address"]: f["samples"] for f in stats["feeders"]}
    assert set(made) == set(feeders.addresses) and sum(made.values()) > 0
    assert all(c["exit_code"] == 0 and c["samples"] >= 0 for c in feeders.counters)
    assert sum(c["samples"] for c in feeders.counters) == sum(made.values())
    with pytest.raises(ValueError, match="secret"):
        monkeypatch.delenv("STOKER_SECRET_FILE")
        stoker.ray.start_feeders(1, job="raytest")


@pytest.mark.s3
@s3_skip
def test_an_s3_dataset_written_and_read_by_ray(cluster, s3_server, bucket, monkeypatch):
    for name, value in s3_server["env"].items():  # the driver: the sink's start and commit
        monkeypatch.setenv(name, value)
    workers = {"runtime_env": {"env_vars": dict(s3_server["env"])}}
    uri = f"s3://{bucket}/out.stoker"
    data = ray.data.range(300, override_num_blocks=3).map(
        lambda r: {"id": r["id"], "text": f"row {r['id']}"})
    data.write_datasink(stoker.ray.Datasink(uri, columns={"id": "int"}), ray_remote_args=workers)
    ds = stoker.Dataset(uri)
    assert ds.version == 1 and [ds[i]["id"] for i in range(len(ds))] == list(range(300))
    rows = stoker.ray.read(uri, ray_remote_args=workers).take_all()
    assert sorted((r["id"], r["text"]) for r in rows) == [(i, f"row {i}") for i in range(300)]
