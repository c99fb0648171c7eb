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

}  // namespace outbox::relay
