// ServiceView: what a discovery client knows about one service, and the rules for changing it
// (RT-1, RT-2). Pure logic: no I/O, no threads; the DiscoveryClient feeds it registry events and
// list answers, and publishes Table() snapshots for readers.
//
// - A PUT never replaces a member with a newer generation (a late event from an old incarnation
//   cannot resurrect it), and a DELETE removes a member only if it names that generation or a
//   newer one.
// - A whole-service answer (a RESYNC or a List) that would empty the service, or drop more than
//   `max_drop_fraction` of its members, is not applied on its own word: it is held and reported
//   as kNeedsConfirmation until a second, independent read (a fresh List) says the same. This is
//   the empty-list guard: a registry that lost its data, or answered during a partial failure,
//   cannot wipe a gateway's view in one step.
// - Revisions only move forward: anything below the view's revision is stale. Several events
//   may share a revision; a watch resumes from resume_revision(), not from the view's own.
//
// Not thread-safe: one owner (the client's event loop) mutates it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "drover/router.h"
#include "drover/status.h"

namespace drover::sdk {

struct ServiceViewOptions {
  double max_drop_fraction = 0.5;  // a snapshot dropping more needs confirmation
};

enum class Applied {
  kApplied,            // the view changed (or was confirmed unchanged)
  kStale,              // older than what the view holds; nothing changed
  kNeedsConfirmation,  // a snapshot that would drop too much; held until a second read agrees
  kRepeated,           // an event of the newest revision applied before (a resumed watch
                       // replays that revision); nothing changed
};

class ServiceView {
 public:
  explicit ServiceView(std::string service, ServiceViewOptions options = {})
      : service_(std::move(service)), options_(options) {}

  // One instance changed at `revision`.
  Applied Put(router::Endpoint endpoint, std::uint64_t revision);
  // One instance left at `revision` (deregistered, expired, fenced).
  Applied Delete(const std::string& id, std::uint64_t generation, std::uint64_t revision);
  // The whole service at `revision`, from a RESYNC or a List. `confirmed` is true when this
  // answer comes from a second read made because the first needed confirmation.
  Applied Replace(std::vector<router::Endpoint> endpoints, std::uint64_t revision, bool confirmed);
  // Nothing changed up to `revision` (a PROGRESS event).
  void Progress(std::uint64_t revision);

  const std::string& service() const { return service_; }
  std::uint64_t revision() const { return revision_; }
  // Where a watch resumes: every event up to this revision has been applied. After an event, the
  // events of its revision may have arrived only in part (a stream that broke between two of
  // them), so the view's own revision counts as complete only once a newer event, a PROGRESS or
  // a whole service says so; resuming from the one before replays it whole.
  std::uint64_t resume_revision() const { return complete_; }
  // How many times the members changed (an applied PUT, DELETE or whole service): two tables of
  // one revision, built as its events arrive one by one, differ by it.
  std::uint64_t changes() const { return changes_; }
  std::size_t size() const { return members_.size(); }
  // True while a drop-too-much snapshot waits for its confirming read.
  bool awaiting_confirmation() const { return awaiting_confirmation_; }

  // An immutable table of the current members; its version is the view's revision.
  Result<std::shared_ptr<const router::RoutingTable>> Table() const;

 private:
  bool DropsTooMuch(const std::vector<router::Endpoint>& next) const;
  // Whether this event of `revision` (not stale) is new: false for one of the newest revision
  // applied before.
  bool FirstTime(char type, const std::string& id, std::uint64_t generation,
                 std::uint64_t revision);
  // An event at `revision` (not stale) was consumed.
  void Advance(std::uint64_t revision);

  const std::string service_;
  const ServiceViewOptions options_;
  std::map<std::string, router::Endpoint> members_;  // by id
  std::uint64_t revision_ = 0;
  std::uint64_t complete_ = 0;    // see resume_revision()
  std::uint64_t changes_ = 0;     // see changes()
  std::set<std::string> newest_;  // events applied at revision_: type, generation, id
  bool awaiting_confirmation_ = false;
};

}  // namespace drover::sdk
