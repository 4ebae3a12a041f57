// One task attempt: its rows piped to a `stoker pack - PATH --part K --job J` process, which
// writes them as a part (nothing visible until the driver commits). Started at the first row:
// a task without rows writes nothing.
package stoker.spark;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.WriterCommitMessage;

final class StokerRowWriter implements DataWriter<InternalRow> {
  // A part index is drawn at random for each attempt: two share one with odds 2^-31.
  private static final SecureRandom RANDOM = new SecureRandom();
  private final StokerBatchWrite.Settings settings;
  private final int partition;
  private final long part = RANDOM.nextInt() & 0x7FFFFFFFL;
  private Process process;
  private File log;
  private RowStreamOutput out;
  private long rows;

  StokerRowWriter(StokerBatchWrite.Settings settings, int partition) {
    this.settings = settings;
    this.partition = partition;
  }

  @Override
  public void write(InternalRow row) throws IOException {
    if (process == null) start();
    try {
      out.beginRow();
      settings.columns.write(row, out);
    } catch (IOException e) {
      throw failed(e);  // the pack stopped reading: its own error says why
    }
    rows++;
  }

  private void start() throws IOException {
    List<String> command = new ArrayList<>(List.of(settings.binary, "pack", "-", settings.path,
        "--part", Long.toString(part), "--job", settings.job, "--name",
        String.format("%s-%010d", settings.job, partition), "-q"));
    command.addAll(settings.columns.packFlags());
    command.addAll(settings.packFlags);
    log = File.createTempFile("stoker-pack", ".log");
    try {
      process = new ProcessBuilder(command).redirectOutput(ProcessBuilder.Redirect.DISCARD)
          .redirectError(log).start();
    } catch (IOException e) {
      log.delete();
      throw new IOException(StokerBatchWrite.cannotRun(settings, e), e);
    }
    out = new RowStreamOutput(process.getOutputStream());
  }

  @Override
  public WriterCommitMessage commit() throws IOException {
    if (process == null) return new StokerBatchWrite.Part(part, 0);
    try {
      out.end();
      out.close();
    } catch (IOException e) {
      throw failed(e);
    }
    int rc = waitFor();
    if (rc != 0) throw failed(null);
    return new StokerBatchWrite.Part(part, rows);
  }

  private IOException failed(IOException cause) {
    waitFor();
    String said;
    try {
      said = new String(Files.readAllBytes(log.toPath()), StandardCharsets.UTF_8).trim();
    } catch (IOException e) {
      said = "(its error output is lost: " + e.getMessage() + ")";
    }
    return new IOException("stoker pack of partition " + partition + " (part " + part
        + " of job " + settings.job + ") failed: " + said, cause);
  }

  // No time limit: a pack writing a large part to slow storage is working; a hung one ends with
  // the task (Spark interrupts it).
  private int waitFor() {
    try {
      return process.waitFor();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      process.destroyForcibly();
      return -1;
    }
  }

  @Override
  public void abort() {
    if (process == null) return;
    // Closed without its end marker, the pack removes what it wrote and exits.
    try {
      process.getOutputStream().close();
    } catch (IOException e) {
      // it has gone already
    }
    try {
      if (!process.waitFor(60, TimeUnit.SECONDS)) process.destroyForcibly();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      process.destroyForcibly();
    }
  }

  @Override
  public void close() {
    if (process != null && process.isAlive()) process.destroyForcibly();
    if (log != null) log.delete();
  }
}
