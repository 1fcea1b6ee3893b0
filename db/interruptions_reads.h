// What the store knows about interruptions on a place (runs/interruptions.h turns it into a mean
// time between interruptions): the seconds runs were running there and how many times a running
// run there was preempted.
//
// Decision: both come from rows the store already keeps, so nothing new is written for them.
// Running time is the accruals' (cost_accruals per node, cluster_accruals per Slurm cluster):
// an accrual is open exactly while its run is running on that node or cluster, and closes at the
// run's next status change. A preemption is a status event "running -> preempted" (db::set_status
// writes one for a node run's preempted end, a node recovery's, and a Slurm requeue's) at the time
// one of that place's accruals for the run closed; so a run moved from node b to node c by a
// recovery counts its preemption on b, where its accrual closed, not on c.
#pragma once

#include <cstdint>
#include <string>

#include "db/database.h"

namespace flotilla::db {

struct PlaceExposure {
  bool known = false;       // the node or cluster is in the store
  bool spot = false;        // a node priced as spot (node_pricing.spot)
  double running_s = 0;     // seconds runs were running there (open accruals count up to `now`)
  int64_t preemptions = 0;  // running -> preempted while an accrual there was open
};

// A stored node by name ("local" is this machine's node row).
PlaceExposure node_exposure(const Database& db, const std::string& node_name, double now);
// A stored Slurm cluster, optionally one partition (its jobs' slurm_jobs.partition_name).
PlaceExposure cluster_exposure(const Database& db, const std::string& cluster_name,
                               const std::string& partition, double now);

}  // namespace flotilla::db
