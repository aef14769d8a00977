// Rank-grid arithmetic and communicator construction.
#include "parallel/grid.h"

#include <sstream>

#include "parallel/mpi_comm.h"

namespace dit {

std::string Layout::str() const {
  std::ostringstream os;
  os << "tp " << tp << " pp " << pp << " dp " << dp;
  return os.str();
}

GridCoord grid_coord(const Layout& l, int r) {
  GridCoord c;
  c.tp = r % l.tp;
  c.dp = (r / l.tp) % l.dp;
  c.pp = r / (l.tp * l.dp);
  return c;
}

int grid_rank(const Layout& l, const GridCoord& c) { return c.tp + l.tp * (c.dp + l.dp * c.pp); }

ParallelContext make_single_context() {
  ParallelContext ctx;
  ctx.world = std::make_unique<SelfComm>();
  ctx.tp = std::make_unique<SelfComm>();
  ctx.pp = std::make_unique<SelfComm>();
  ctx.dp = std::make_unique<SelfComm>();
  return ctx;
}

ParallelContext make_mpi_context(const Layout& layout) {
  auto watch = std::make_shared<CommWatch>();
  return make_mpi_context(layout, MpiComm::world(watch));
}

ParallelContext make_mpi_context(const Layout& layout, std::unique_ptr<Comm> world) {
  ParallelContext ctx;
  ctx.layout = layout;
  ctx.world = std::move(world);
  if (auto* mpi = dynamic_cast<MpiComm*>(ctx.world.get())) ctx.watch = mpi->watch();
  const int n = ctx.world->size();
  DIT_CHECK(layout.tp > 0 && layout.pp > 0 && layout.dp > 0, "layout ", layout.str(),
            ": every size must be positive");
  DIT_CHECK(n == layout.world(), "the job has ", n, " ranks but ", layout.str(), " needs ",
            layout.world(), (n % (layout.tp * layout.pp) == 0
                                 ? "; dp = " + std::to_string(n / (layout.tp * layout.pp)) + " would fit"
                                 : "; the world size must be a multiple of tp x pp = " +
                                       std::to_string(layout.tp * layout.pp)));
  ctx.world_rank = ctx.world->rank();
  ctx.coord = grid_coord(layout, ctx.world_rank);
  const GridCoord c = ctx.coord;
  // Colors identify the group; keys order ranks inside it by their coordinate on that axis.
  const struct {
    std::unique_ptr<Comm>* comm;
    int color, key;
    const char* name;
  } axes[] = {{&ctx.tp, c.dp + layout.dp * c.pp, c.tp, "tp"},
              {&ctx.dp, c.tp + layout.tp * c.pp, c.dp, "dp"},
              {&ctx.pp, c.tp + layout.tp * c.dp, c.pp, "pp"}};
  for (const auto& axis : axes) *axis.comm = MpiComm::split(*ctx.world, axis.color, axis.key, axis.name);
  return ctx;
}

}  // namespace dit
