// One write of a DataFrame as one version (the same protocol as python/stoker/engine_write.py):
// a job name made here on the driver; each task attempt writes a part of its own under a random
// part index, its rows in the directory <job>-<partition:010d> so the version keeps the
// partitions' order; commit publishes exactly the accepted attempts' parts (`stoker commit
// --only-file -`: any number of them), removing the others; abort discards the job, refusing
// any attempt still running or yet to start.
package stoker.spark;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.io.Serializable;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;

final class StokerBatchWrite implements BatchWrite {
  // The writer options passed on to `stoker pack` (as stoker.spark's Python writer takes them).
  private static final String[][] PACK_FLAGS = {
    {"label", "--label"}, {"chunk_size", "--chunk-size"}, {"order", "--order"},
    {"order_seed", "--order-seed"}};

  private final Settings settings;

  StokerBatchWrite(StructType schema, Map<String, String> options) {
    String path = options.get("path");
    if (path == null || path.isEmpty()) {
      throw new IllegalArgumentException(
          "format(\"stoker-jvm\") needs a path: .save(path)");
    }
    byte[] id = new byte[12];
    new SecureRandom().nextBytes(id);
    StringBuilder job = new StringBuilder("spark-");
    for (byte b : id) job.append(String.format("%02x", b));
    List<String> flags = new ArrayList<>();
    for (String[] f : PACK_FLAGS) {
      String v = options.get(f[0]);
      if (v != null && !v.isEmpty()) {
        flags.add(f[1]);
        flags.add(v);
      }
    }
    String binary = options.getOrDefault("stoker", "stoker");
    settings = new Settings(path, job.toString(), binary,
        new RowColumns(schema, options.get("columns")), flags);
    check(settings);
  }

  // What `stoker pack` would refuse in every task (a column name or type, the label, an option's
  // value; the CLI itself missing) is refused here, once: an empty row stream packed into a
  // scratch directory, with the tasks' flags.
  private static void check(Settings s) {
    Path scratch;
    try {
      scratch = Files.createTempDirectory("stoker-jvm-check");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    try {
      List<String> args = new ArrayList<>(List.of("pack", "-", scratch.resolve("check").toString(),
          "-q"));
      args.addAll(s.columns.packFlags());
      args.addAll(s.packFlags);
      run(s, args, "pack (its columns and options, checked on the driver)",
          RowStreamOutput.EMPTY);
    } finally {
      deleteTree(scratch);
    }
  }

  private static void deleteTree(Path root) {
    try (Stream<Path> paths = Files.walk(root)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      // a scratch directory left in the temporary directory: harmless
    }
  }

  static final class Settings implements Serializable {
    private static final long serialVersionUID = 1L;
    final String path;
    final String job;
    final String binary;  // the stoker CLI, on the driver and every executor
    final RowColumns columns;
    final List<String> packFlags;

    Settings(String path, String job, String binary, RowColumns columns, List<String> packFlags) {
      this.path = path;
      this.job = job;
      this.binary = binary;
      this.columns = columns;
      this.packFlags = packFlags;
    }
  }

  // A task attempt's part: its index and how many rows it holds (none: no part written).
  static final class Part implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final long part;
    final long rows;

    Part(long part, long rows) {
      this.part = part;
      this.rows = rows;
    }
  }

  // Shipped to the executors: the settings only.
  private static final class WriterFactory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final Settings settings;

    WriterFactory(Settings settings) {
      this.settings = settings;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new StokerRowWriter(settings, partitionId);
    }
  }

  @Override
  public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
    return new WriterFactory(settings);
  }

  @Override
  public boolean useCommitCoordinator() {
    return true;  // one accepted attempt per partition
  }

  @Override
  public void commit(WriterCommitMessage[] messages) {
    StringBuilder only = new StringBuilder();  // one index a line, on the commit's stdin
    for (WriterCommitMessage m : messages) {
      if (m instanceof Part && ((Part) m).rows > 0) only.append(((Part) m).part).append('\n');
    }
    if (only.length() == 0) {  // no task wrote a row: nothing to publish, the job is closed
      discard();
      return;
    }
    run(settings, List.of("commit", settings.path, "--job", settings.job, "--only-file", "-",
        "--json"), "commit", only.toString().getBytes(StandardCharsets.US_ASCII));
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    discard();
  }

  // Closed even if no part was written yet, so that an attempt starting later is refused too.
  private void discard() {
    run(settings, List.of("commit", settings.path, "--job", settings.job, "--discard",
        "--close-empty", "--json"), "discard", new byte[0]);
  }

  // Runs `stoker ARGS` with `input` on its stdin, to its end; its error output in the exception
  // when it fails.
  static void run(Settings s, List<String> args, String what, byte[] input) {
    List<String> command = new ArrayList<>();
    command.add(s.binary);
    command.addAll(args);
    try {
      File log = File.createTempFile("stoker-", ".log");
      try {
        Process p;
        try {
          p = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD)
              .redirectError(log).start();
        } catch (IOException e) {
          throw new IOException(cannotRun(s, e), e);
        }
        try (OutputStream in = p.getOutputStream()) {
          in.write(input);
        } catch (IOException e) {
          // it exited without reading: its exit code and message say why
        }
        int rc = p.waitFor();
        if (rc != 0) {
          throw new RuntimeException("stoker " + what + " of job " + s.job + " failed (exit "
              + rc + "): " + new String(Files.readAllBytes(log.toPath()),
                  StandardCharsets.UTF_8).trim());
        }
      } finally {
        log.delete();
      }
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RuntimeException("interrupted while running stoker " + what, e);
    }
  }

  static String cannotRun(Settings s, IOException e) {
    return "format(\"stoker-jvm\") runs the stoker CLI on the driver and the executors: cannot "
        + "run '" + s.binary + "' (" + e.getMessage() + "): install stoker there (pip install "
        + "stoker puts it on PATH), or give .option(\"stoker\", \"/path/to/stoker\")";
  }
}
