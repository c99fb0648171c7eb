#include "outbox/relay/session_rules.hpp"

#include <algorithm>

namespace outbox::relay {

RecordVerdict compare_with_record(const RecordFacts& f) {
  if (!f.recorded) return RecordVerdict::kNoRecord;
  if (!f.on_standby && f.record_timeline && *f.record_timeline == f.server_timeline &&
      *f.recorded > f.server_wal_end) {
    return RecordVerdict::kServerBehind;
  }
  if (f.slot_confirmed > *f.recorded) return RecordVerdict::kSlotAhead;
  return RecordVerdict::kAgrees;
}

pgoutput::Lsn slot_confirm_bound(pgoutput::Lsn confirmable, const SlotBound& b) {
  if (!b.records_progress) return confirmable;
  if (!b.verified) return std::min(confirmable, b.session_from);
  return std::min(confirmable, b.record_acked);
}

TxnEnd transaction_at_end(const TxnAtEnd& t) {
  if (!t.open) return TxnEnd::kLeave;
  if (!t.failed && !t.rewinding && t.commit_due) return TxnEnd::kCommit;
  if (t.records > 0 || t.in_transaction) return TxnEnd::kAbort;
  return TxnEnd::kLeave;
}

bool final_check_wanted(bool stopping, bool poison, bool rewinding, bool waiting_for_check) {
  return (stopping || poison) && !rewinding && waiting_for_check;
}

bool progress_flush_wanted(bool records_progress, bool broker_refused, bool ending,
                           pgoutput::Lsn target, pgoutput::Lsn record_acked) {
  return records_progress && !broker_refused && ending && target > record_acked;
}

pgoutput::Lsn stream_start(bool history_continues, pgoutput::Lsn acknowledged,
                           pgoutput::Lsn server_wal_end) {
  return history_continues && acknowledged <= server_wal_end ? acknowledged : pgoutput::Lsn{};
}

SinkStop answer_sink_stop(bool fenced, bool stop_requested, bool exactly_once) {
  if (fenced) return SinkStop::kFenced;
  if (stop_requested) return SinkStop::kFail;
  return exactly_once ? SinkStop::kAbortTransaction : SinkStop::kRewind;
}

bool halt_on_rewind(bool exactly_once, bool sink_stopped) { return !exactly_once && !sink_stopped; }

bool reader_goes_on(bool committing, bool paused, bool leaving, bool below_low_watermark) {
  return committing || !paused || leaving || below_low_watermark;
}

std::chrono::milliseconds delivery_watch_period(std::chrono::milliseconds timeout) {
  return std::min<std::chrono::milliseconds>(
      std::chrono::seconds(1),
      std::max<std::chrono::milliseconds>(timeout / 5, std::chrono::milliseconds(10)));
}

bool deliveries_overdue(std::size_t queued, std::chrono::steady_clock::duration since_last_report,
                        std::chrono::milliseconds timeout) {
  return queued > 0 && since_last_report >= timeout;
}

}  // namespace outbox::relay
