"""stoker.spark (issue 40): `spark.read.format("stoker")` and `df.write.format("stoker")` (and
`format("stoker-jvm")`, the writer in the executors' JVMs: stoker-spark.jar) in
Spark's local-cluster mode (a master and two workers in the driver's JVM, each executor a JVM
of its own, all on loopback), with PySpark 4 from PyPI and Debian's OpenJDK 17. A write is one
version however many tasks write it, stays so when an executor is killed after its task wrote
its part and Spark runs the task again, and refuses what it must."""
from __future__ import annotations

import io
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest

# Before the JVM starts: executors find their jars by the Scala version, and run this Python.
os.environ["SPARK_SCALA_VERSION"] = "2.13"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# format("stoker-jvm") runs the `stoker` CLI on the driver and executors: this venv's.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
from pyspark import cloudpickle  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import stoker  # noqa: E402
import stoker.spark  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    session = (SparkSession.builder.master("local-cluster[2,1,1024]").appName("stoker-tests")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.task.maxFailures", "4")
               .config("spark.jars", stoker.spark.jar())
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    stoker.spark.register(session)
    # The test's own data source (below) runs in the executors, which cannot import this file.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    session.dataSource.register(DiesOnceSource)
    yield session
    session.stop()


def jpeg(i: int) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (8, 8 + i % 3), (i % 256, 9, 1)).save(buf, "JPEG")
    return buf.getvalue()


def test_a_write_is_one_version_and_reads_back(spark, tmp_path):
    uri = str(tmp_path / "caps.stoker")
    rows = [(i, f"caption {i}" if i % 5 else None, jpeg(i), [float(i), -float(i)], i % 7)
            for i in range(300)]
    df = spark.createDataFrame(
        rows, "id long, caption string, image binary, emb array<float>, label int"
    ).repartition(4).sortWithinPartitions("id")
    (df.write.format("stoker").mode("append").option("columns", "image=jpeg,id=int")
     .option("label", "label").option("chunk_size", "16KiB").save(uri))
    ds = stoker.Dataset(uri)
    assert ds.version == 1 and len(ds) == 300
    assert ds.columns == {"caption": "str?", "emb": "ndarray:float32?", "id": "int",
                          "image": "jpeg", "label": "int?"}
    assert ds.label_column == "label"
    got = {ds[i]["id"]: ds[i] for i in range(len(ds))}
    for i, caption, image, emb, label in rows:
        assert got[i]["caption"] == caption and got[i]["image"] == image
        assert np.array_equal(got[i]["emb"], np.array(emb, np.float32)) and got[i]["label"] == label
    assert [p.name for p in next((Path(uri) / "parts").iterdir()).iterdir()] == ["closed"]

    back = spark.read.format("stoker").load(uri)
    assert back.schema.simpleString() == ("struct<caption:string,emb:array<float>,id:bigint,"
                                          "image:binary,label:bigint>")
    assert ds.num_chunks >= 3 and back.rdd.getNumPartitions() == 1  # chunks of ~128 MiB
    back = spark.read.format("stoker").option("partitions", "3").load(uri)
    assert back.rdd.getNumPartitions() == 3
    read = {r["id"]: r for r in back.collect()}
    assert len(read) == 300
    for i, caption, image, emb, label in rows:
        assert read[i]["caption"] == caption and bytes(read[i]["image"]) == image
        assert read[i]["emb"] == emb and read[i]["label"] == label
    # append writes the next version; overwrite is refused, the version untouched.
    df.limit(10).write.format("stoker").mode("append").option("columns", "image=jpeg,id=int") \
        .option("label", "label").save(uri)
    assert stoker.Dataset(uri).version == 2 and len(stoker.Dataset(uri)) == 310
    with pytest.raises(Exception, match="never replaces a published version"):
        df.write.format("stoker").mode("overwrite").save(uri)
    assert stoker.spark.__name__ and stoker.Dataset(uri).version == 2
    assert spark.read.format("stoker").option("version", "1").load(uri).count() == 300


def test_a_file_dataset_reads_as_path_label_data(spark, tmp_path):
    files = {f"c{i % 3}/f{i:02d}.jpg": jpeg(i) for i in range(30)}
    for rel, data in files.items():
        (tmp_path / "tree" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "tree" / rel).write_bytes(data)
    uri = str(tmp_path / "files.stoker")
    stoker.pack(str(tmp_path / "tree"), uri, progress=False)
    rows = spark.read.format("stoker").load(uri).collect()
    assert {r["path"]: bytes(r["data"]) for r in rows} == files
    assert all(r["label"] == int(r["path"][1]) for r in rows)


def test_a_name_that_is_not_utf8_reads_with_its_bytes_escaped(spark, tmp_path):
    """Spark strings are UTF-8: such a name reads as Python prints its bytes (\\xff), and the
    other files read as they are, rather than every task failing on one name."""
    (tmp_path / "tree" / "cat").mkdir(parents=True)
    (tmp_path / "tree" / "cat" / "ok.bin").write_bytes(b"ok")
    (tmp_path / "tree" / "cat").joinpath(os.fsdecode(b"bad\xff.bin")).write_bytes(b"bad")
    uri = str(tmp_path / "names.stoker")
    stoker.pack(str(tmp_path / "tree"), uri, progress=False)
    rows = spark.read.format("stoker").load(uri).collect()
    assert {r["path"]: bytes(r["data"]) for r in rows} == {"cat/ok.bin": b"ok",
                                                          "cat/bad\\xff.bin": b"bad"}


def test_a_given_schema_reads_those_columns_and_a_wrong_one_is_named(spark, tmp_path):
    uri = str(tmp_path / "s.stoker")
    with stoker.Writer(uri, columns={"a": "int", "b": "str", "t": "tokens:uint64"}) as w:
        for i in range(6):
            w.write({"a": i, "b": f"s{i}", "t": np.array([2**63 + i], np.uint64)})
    # uint64 tokens of 2**63 and more do not fit Spark's bigint: the error names the column;
    # a schema without it reads the rest (a projection).
    with pytest.raises(Exception, match="column 't'.*does not fit Spark's array<bigint>"):
        spark.read.format("stoker").load(uri).collect()
    rows = spark.read.format("stoker").schema("b string, a bigint").load(uri).collect()
    assert [(r["b"], r["a"]) for r in rows] == [(f"s{i}", i) for i in range(6)]
    with pytest.raises(Exception, match="schema: 'c' is not a column of"):
        spark.read.format("stoker").schema("a bigint, c string").load(uri).collect()
    with pytest.raises(Exception, match="schema: column 'a' of .* is bigint, not string"):
        spark.read.format("stoker").schema("a string").load(uri).collect()
    with pytest.raises(Exception, match="option partitions: 'abc' is not a whole number"):
        spark.read.format("stoker").option("partitions", "abc").load(uri).collect()
    with pytest.raises(Exception, match="takes no option partitons"):
        spark.read.format("stoker").option("partitons", "2").load(uri).collect()


def test_maps_are_json_objects_and_declared_text_types_convert(spark, tmp_path):
    from pyspark.sql import Row
    df = spark.createDataFrame([Row(m={"a": 1, "b": 2}, s=Row(x=1, m={"k": [1, 2]}),
                                    raw=b"caf\xc3\xa9", text="hi")])
    uri = str(tmp_path / "m.stoker")
    (df.write.format("stoker").mode("append").option("columns", "raw=str,text=bytes")
     .save(uri))
    ds = stoker.Dataset(uri)
    assert ds.columns == {"m": "json?", "s": "json?", "raw": "str", "text": "bytes"}
    assert ds[0] == {"m": {"a": 1, "b": 2}, "s": {"x": 1, "m": {"k": [1, 2]}}, "raw": "café",
                     "text": b"hi"}


def test_arrays_of_any_shape_read_as_spark_arrays(spark, tmp_path):
    uri = str(tmp_path / "arrays.stoker")
    rng = np.random.default_rng(3)
    want = [{"fixed": rng.standard_normal((2, 3)), "any": rng.standard_normal((i % 3 + 1, 2))
             .astype(np.float32), "raw": np.arange(i, dtype=np.int16).reshape(1, i),
             "toks": np.arange(i, dtype=np.uint16) + 65000} for i in range(1, 9)]
    with stoker.Writer(uri, columns={"fixed": "ndarray:float64:2x3", "any": "ndarray:float32",
                                     "raw": "ndarray", "toks": "tokens:uint16"}) as w:
        for row in want:
            w.write(row)
    df = spark.read.format("stoker").load(uri)
    assert df.schema.simpleString() == ("struct<any:array<float>,fixed:array<array<double>>,"
                                        "raw:binary,toks:array<int>>")
    got = sorted(df.collect(), key=lambda r: len(r["toks"]))
    for row, exp in zip(got, want, strict=True):
        assert np.array_equal(np.array(row["fixed"]), exp["fixed"])
        assert np.array_equal(np.array(row["any"], np.float32), exp["any"].ravel())
        assert np.array_equal(np.load(io.BytesIO(bytes(row["raw"]))), exp["raw"])  # a .npy
        assert row["toks"] == exp["toks"].tolist()  # uint16 as int: 65000 and up fit


class DiesOnceWriter(stoker.spark._Writer):
    """Writes its part, then kills its executor's JVM before Spark hears of the task: the first
    attempt of partition 1 only."""

    def __init__(self, uri, schema, options):
        super().__init__(uri, schema, options)
        self.marker = options["marker"]

    def write(self, iterator):
        from pyspark import TaskContext
        message = super().write(iterator)
        if TaskContext.get().partitionId() == 1 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            pid = os.getpid()
            while pid > 1:  # up to the executor's JVM
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"CoarseGrainedExecutorBackend" in f.read():
                        os.kill(pid, signal.SIGKILL)
                        break
                with open(f"/proc/{pid}/stat") as f:
                    pid = int(f.read().rpartition(")")[2].split()[1])
            os._exit(1)
        return message


class DiesOnceSource(stoker.spark.StokerDataSource):
    @classmethod
    def name(cls):
        return "stoker_dies_once"

    def writer(self, schema, overwrite):
        return DiesOnceWriter(self._uri(), schema, dict(self.options))


def test_a_task_retried_after_its_executor_was_killed_leaves_no_duplicate(spark, tmp_path):
    uri, marker = str(tmp_path / "retry.stoker"), str(tmp_path / "died")
    df = spark.range(0, 400, numPartitions=4)
    df.write.format("stoker_dies_once").mode("append").option("marker", marker) \
        .option("columns", "id=int").save(uri)
    assert os.path.exists(marker)  # the executor was killed
    ds = stoker.Dataset(uri)
    assert ds.version == 1
    assert [ds[i]["id"] for i in range(len(ds))] == list(range(400))  # once each, in order
    job = next((Path(uri) / "parts").iterdir())
    assert [p.name for p in job.iterdir()] == ["closed"]  # the killed attempt's part is gone


def test_bad_writes_are_refused(spark, tmp_path):
    df = spark.range(0, 10, numPartitions=2)
    with pytest.raises(Exception, match="NAME=TYPE"):
        df.write.format("stoker").mode("append").option("columns", "id").save(
            str(tmp_path / "x.stoker"))
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE|ErrorIfExists"):
        df.write.format("stoker").save(str(tmp_path / "y.stoker"))
    assert not (tmp_path / "y.stoker" / "versions").exists()
    # An append of other columns is refused on the driver, before any task writes a part.
    uri = str(tmp_path / "z.stoker")
    df.write.format("stoker").mode("append").save(uri)
    jobs = sorted((Path(uri) / "parts").iterdir())
    other = spark.createDataFrame([("a",)], "id string")
    with pytest.raises(Exception, match=r"holds id:int\?; this write's columns are id:str\?: "
                                        "an append needs the same"):
        other.write.format("stoker").mode("append").save(uri)
    assert sorted((Path(uri) / "parts").iterdir()) == jobs  # no job was started


# --- format("stoker-jvm"): the writer in the executors' JVMs (stoker.spark.jar()) -------------

TYPES = ("id long, caption string, image binary, emb array<float>, label int, toks array<int>, "
         "flag boolean, score double, small short")


def typed_rows(n: int) -> list:
    return [(i, f"caption {i} é" if i % 5 else None, jpeg(i), [float(i), -float(i) / 3],
             i % 7, list(range(i % 4)), i % 2 == 0, i / 3 if i % 11 else float("nan"), i - 50)
            for i in range(n)]


def same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype
    if isinstance(a, float) and isinstance(b, float) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def test_the_jvm_writer_writes_what_the_python_writer_writes(spark, tmp_path):
    df = spark.createDataFrame(typed_rows(300), TYPES).repartition(4).sortWithinPartitions("id")
    out = {}
    for fmt in ("stoker", "stoker-jvm"):
        out[fmt] = str(tmp_path / f"{fmt}.stoker")
        (df.write.format(fmt).mode("append").option("columns", "image=jpeg,id=int")
         .option("label", "label").option("chunk_size", "16KiB").save(out[fmt]))
    py, jvm = stoker.Dataset(out["stoker"]), stoker.Dataset(out["stoker-jvm"])
    assert jvm.version == 1 and len(jvm) == 300 and jvm.num_chunks >= 3
    assert jvm.columns == py.columns and jvm.label_column == py.label_column == "label"
    assert jvm.columns["image"] == "jpeg" and jvm.columns["score"] == "float:nan?"
    for i in range(300):  # the same rows, in the same (partition) order, value for value
        a, b = py[i], jvm[i]
        assert a.keys() == b.keys()
        assert all(same(a[k], b[k]) for k in a), (i, a, b)
    assert [p.name for p in next((Path(out["stoker-jvm"]) / "parts").iterdir()).iterdir()] == \
        ["closed"]
    # append: the next version; reading it back is format("stoker")'s.
    df.limit(10).write.format("stoker-jvm").mode("append").option("columns", "image=jpeg,id=int") \
        .option("label", "label").save(out["stoker-jvm"])
    assert stoker.Dataset(out["stoker-jvm"]).version == 2
    assert spark.read.format("stoker").load(out["stoker-jvm"]).count() == 310


def test_both_writers_store_structs_maps_and_other_arrays_as_the_same_json(spark, tmp_path):
    """Structs, maps (objects), arrays of strings, booleans or arrays, and a string declared
    json (a JSON string): format("stoker-jvm") writes what format("stoker") writes, value for
    value; what JSON cannot hold is refused by both."""
    from pyspark.sql import Row
    rows = [Row(id=i, s=Row(x=i, name=f"n\"{i}\\\u00e9\n", m={"k": [1.5, float(i)]},
                            flag=i % 2 == 0),
                m={i: "a", i + 1: None} if i % 3 else None, words=["a", None, f"w{i}"],
                flags=[True, False], grid=[[1, 2], [i]], doc=f'{{"v": {i}}}',
                f=[{"a": 1e20, "b": 1 / 3}])
            for i in range(20)]
    df = spark.createDataFrame(
        rows, "id long, s struct<x: long, name: string, m: map<string, array<double>>, "
              "flag: boolean>, m map<int, string>, words array<string>, flags array<boolean>, "
              "grid array<array<int>>, doc string, f array<map<string, double>>").coalesce(2)
    out = {}
    for fmt in ("stoker", "stoker-jvm"):
        out[fmt] = str(tmp_path / f"{fmt}.stoker")
        df.write.format(fmt).mode("append").option("columns", "doc=json").save(out[fmt])
    py, jvm = stoker.Dataset(out["stoker"]), stoker.Dataset(out["stoker-jvm"])
    assert jvm.columns == py.columns
    assert {k: v for k, v in jvm.columns.items() if k != "id"} == {
        "s": "json?", "m": "json?", "words": "json?", "flags": "json?", "grid": "json?",
        "doc": "json", "f": "json?"}
    for i in range(len(rows)):
        assert py[i] == jvm[i], (i, py[i], jvm[i])
    assert jvm[1]["m"] == {"1": "a", "2": None} and jvm[0]["m"] is None
    assert jvm[3]["doc"] == '{"v": 3}' and jvm[2]["s"]["name"] == 'n"2\\\u00e9\n'

    nan = spark.createDataFrame([Row(s=Row(v=float("nan")))], "s struct<v: double>")
    for fmt in ("stoker", "stoker-jvm"):
        with pytest.raises(Exception, match="JSON"):
            nan.write.format(fmt).mode("append").save(str(tmp_path / f"nan-{fmt}"))
        assert not (tmp_path / f"nan-{fmt}" / "versions").exists()
    binary = spark.createDataFrame([Row(s=Row(b=b"x"))], "s struct<b: binary>")
    with pytest.raises(Exception, match="binary values have no JSON form"):
        binary.write.format("stoker-jvm").mode("append").save(str(tmp_path / "bin"))


def test_a_jvm_task_retried_after_its_executor_was_killed_leaves_no_duplicate(spark, tmp_path):
    """The `stoker` the executors run is a script that, for partition 1's first attempt, lets
    the real pack write its part and then kills the executor's JVM before Spark hears of it."""
    uri, marker = str(tmp_path / "retry.stoker"), tmp_path / "died"
    real = Path(sys.executable).parent / "stoker"
    script = tmp_path / "stoker-then-die"
    script.write_text(f"""#!/bin/sh
"{real}" "$@"; rc=$?
case "$*" in *-0000000001" "*)
  if [ ! -e "{marker}" ]; then touch "{marker}"; kill -9 $PPID; sleep 10; fi;;
esac
exit $rc
""")
    script.chmod(0o755)
    spark.range(0, 400, numPartitions=4).write.format("stoker-jvm").mode("append") \
        .option("stoker", str(script)).save(uri)
    assert marker.exists()  # the executor was killed
    ds = stoker.Dataset(uri)
    assert ds.version == 1 and ds.columns == {"id": "int?"}
    assert [ds[i]["id"] for i in range(len(ds))] == list(range(400))  # once each, in order
    job = next((Path(uri) / "parts").iterdir())
    assert [p.name for p in job.iterdir()] == ["closed"]  # the killed attempt's part is gone


def test_bad_jvm_writes_are_refused_and_publish_nothing(spark, tmp_path):
    df = spark.createDataFrame(typed_rows(20), TYPES).repartition(2)

    def refused(match, name, frame=df, mode="append", **options):
        writer = frame.write.format("stoker-jvm")
        if mode:
            writer = writer.mode(mode)
        for key, value in options.items():
            writer = writer.option(key, value)
        with pytest.raises(Exception, match=match):
            writer.save(str(tmp_path / name))
        assert not (tmp_path / name / "versions").exists()

    # Refused on the driver, before any task runs.
    refused("NAME=TYPE", "a", columns="id")
    refused("'nope' is not a column", "b", columns="nope=int")
    refused("a string column cannot be stored as int", "c", columns="caption=int")
    refused("binary values have no JSON form", "c2",
            spark.sql("select named_struct('b', binary('x')) as s"))
    refused("does not write timestamp", "d", spark.sql("select current_timestamp() as t"))
    refused("column 'caption': a label column must be of type int", "d2", label="caption")
    refused("chunk", "d3", chunk_size="lots")
    refused("cannot run '/no/such/stoker'", "f", stoker="/no/such/stoker")
    refused("UNSUPPORTED_DATA_SOURCE_SAVE_MODE|ErrorIfExists", "g", mode=None)
    # A value the column cannot hold: named (row and column) by a task's pack, nothing published.
    refused(r"row \d+: column 'caption': not a jpeg", "e", columns="caption=jpeg?")
    refused(r"element 0 \(-?\d+\) does not fit uint8|element 0 is null", "e2",
            spark.createDataFrame([([300],), ([1],)], "t array<int>"), columns="t=tokens:uint8")
    uri = str(tmp_path / "h")
    df.write.format("stoker-jvm").mode("append").save(uri)
    with pytest.raises(Exception, match="never replaces a published version"):
        df.write.format("stoker-jvm").mode("overwrite").save(uri)
    assert stoker.Dataset(uri).version == 1 and len(stoker.Dataset(uri)) == 20
    with pytest.raises(Exception, match="only writes"):
        spark.read.format("stoker-jvm").load(uri).collect()
    df.limit(0).write.format("stoker-jvm").mode("append").save(str(tmp_path / "empty"))
    assert not (tmp_path / "empty" / "versions").exists()  # no rows: nothing published


def test_null_array_elements_are_nan_as_the_python_writer_makes_them(spark, tmp_path):
    df = spark.createDataFrame([(1, [1.0, None]), (2, None)], "id long, emb array<double>")
    for fmt in ("stoker", "stoker-jvm"):
        uri = str(tmp_path / f"{fmt}.stoker")
        df.coalesce(1).write.format(fmt).mode("append").save(uri)
        ds = stoker.Dataset(uri)
        assert ds.columns == {"id": "int?", "emb": "ndarray:float64?"}
        assert ds[0]["emb"][0] == 1.0 and np.isnan(ds[0]["emb"][1]) and ds[1]["emb"] is None


def test_the_jvm_writer_takes_every_element_type_and_fixed_shapes(spark, tmp_path):
    """float16 (rounded as numpy rounds), bool, uint64 tokens and nested arrays of a fixed shape:
    the same values as the Python writer stores with the same column types."""
    # 65519 rounds to float16's largest, 65504; 65520 and more would round to infinity, an
    # error (below).
    halves = [0.1, 1 / 3, 65504.0, 65519.0, 1e-8, 2.0 ** -24 * 1.5, -2.5e-6, -65504.0, -0.0]
    rows = [(i, [h / (i + 1) for h in halves], [i % 2 == 0, i % 3 == 0, True],
             [2 ** 63 - 1 - i, i], [[float(i + r * 3 + c) for c in range(3)] for r in range(2)])
            for i in range(40)]
    df = spark.createDataFrame(
        rows, "id long, h array<double>, mask array<boolean>, big array<long>, "
              "grid array<array<float>>").coalesce(2)
    columns = "h=ndarray:float16,mask=ndarray:bool,big=tokens:uint64,grid=ndarray:float32:2x3"
    out = {}
    for fmt in ("stoker", "stoker-jvm"):
        out[fmt] = str(tmp_path / f"{fmt}.stoker")
        df.write.format(fmt).mode("append").option("columns", columns).save(out[fmt])
    py, jvm = stoker.Dataset(out["stoker"]), stoker.Dataset(out["stoker-jvm"])
    assert jvm.columns == py.columns
    assert jvm.columns["grid"] == "ndarray:float32:2x3"
    for i in range(len(rows)):
        a, b = py[i], jvm[i]
        assert all(same(a[k], b[k]) for k in a), (i, a, b)
    assert np.array_equal(jvm[0]["h"], np.asarray(halves, dtype=np.float16))  # numpy's rounding
    assert jvm[0]["grid"].shape == (2, 3) and jvm[0]["big"][0] == 2 ** 63 - 1

    def refused(match, frame, columns, name):
        with pytest.raises(Exception, match=match):
            frame.write.format("stoker-jvm").mode("append").option("columns", columns) \
                .save(str(tmp_path / name))
        assert not (tmp_path / name / "versions").exists()

    nested = spark.createDataFrame([([[1.0, 2.0], [3.0]],)], "g array<array<double>>")
    refused("needs a shape of 2 dimensions", nested, "g=ndarray:float32", "a")
    refused(r"level 1 has 1 elements, the shape \[2, 2\] says 2", nested, "g=ndarray:float32:2x2",
            "b")
    refused(r"element 0 \(-1\) does not fit uint64",
            spark.createDataFrame([([-1],)], "t array<long>"), "t=tokens:uint64", "c")
    refused("boolean elements cannot be stored as float32",
            spark.createDataFrame([([True],)], "m array<boolean>"), "m=ndarray:float32", "d")
    flat = spark.createDataFrame([([1.0] * 6,)], "f array<double>")
    refused("cannot have the 2-dimensional shape", flat, "f=ndarray:float32:2x3", "e")
    refused("double elements cannot be stored as int32", flat, "f=tokens:int32", "f")
    # A finite value beyond float16's (float32's) range would be stored as infinity by numpy:
    # both writers refuse it, naming the column and the value.
    half = spark.createDataFrame([([1.0, 70000.0],)], "f array<double>")
    refused(r"'f': element 1 \(70000.0\) does not fit float16", half, "f=ndarray:float16", "g")
    refused(r"'f': element 0 \(1.0E39\) does not fit float32",
            spark.createDataFrame([([1e39, 1.0],)], "f array<double>"), "f=ndarray:float32", "h")
    with pytest.raises(Exception, match=r"'f': element 70000.0 does not fit float16"):
        half.write.format("stoker").mode("append").option(
            "columns", "f=ndarray:float16").save(str(tmp_path / "i"))
    assert not (tmp_path / "i" / "versions").exists()
