// One write of a DataFrame as one version (the same protocol as python/stoker/engine_write.py):
// a job name made here on the driver; each task attempt writes a part of its own under a random
// part index, its rows in the directory <job>-<partition:010d> so the version keeps the
// partitions' order; commit publishes exactly the accepted attempts' parts (`stoker commit
// --only`), removing the others; abort discards the job, refusing any attempt still running.
package stoker.spark;

import java.io.File;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.StringJoiner;
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
    StringJoiner only = new StringJoiner(",");
    for (WriterCommitMessage m : messages) {
      if (m instanceof Part && ((Part) m).rows > 0) only.add(Long.toString(((Part) m).part));
    }
    if (only.length() == 0) {  // no task wrote a row: nothing to publish, the job is closed
      discard();
      return;
    }
    run(settings, List.of("commit", settings.path, "--job", settings.job, "--only",
        only.toString(), "--json"), "commit");
  }

  @Override
  public void abort(WriterCommitMessage[] messages) {
    discard();
  }

  private void discard() {
    try {
      run(settings, List.of("commit", settings.path, "--job", settings.job, "--discard",
          "--json"), "discard");
    } catch (RuntimeException e) {
      // No part was written (the job has no directory): nothing to discard.
      if (!e.getMessage().contains("NotFound")) throw e;
    }
  }

  // Runs `stoker ARGS` to its end; its error output in the exception when it fails.
  static void run(Settings s, List<String> args, String what) {
    List<String> command = new ArrayList<>();
    command.add(s.binary);
    command.addAll(args);
    try {
      File log = File.createTempFile("stoker-" + what, ".log");
      try {
        Process p = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD)
            .redirectError(log).start();
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
      throw new RuntimeException(cannotRun(s, e), e);
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
