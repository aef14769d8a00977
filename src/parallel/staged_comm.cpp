// Host-staged communication for device and low-precision tensors (see staged_comm.h).
#include "parallel/staged_comm.h"

#include <chrono>
#include <utility>

namespace dit {

StagedComm::StagedComm(std::unique_ptr<Comm> inner, Backend& be) : inner_(std::move(inner)), be_(&be) {
  DIT_CHECK(inner_ != nullptr, "StagedComm needs a communicator to wrap");
}

template <typename F>
auto StagedComm::counted(F&& f, double byte_ratio) {
  const CommStats before = inner_->stats();
  const auto t0 = std::chrono::steady_clock::now();
  struct Account {
    StagedComm* self;
    CommStats before;
    double ratio;
    std::chrono::steady_clock::time_point t0;
    ~Account() {
      const CommStats& after = self->inner_->stats();
      const double bytes = static_cast<double>(after.bytes - before.bytes) * ratio;
      self->stats_.bytes += static_cast<std::uint64_t>(bytes);
      self->stats_.calls += after.calls - before.calls;
      self->stats_.seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  } account{this, before, byte_ratio, t0};
  return f();
}

bool StagedComm::direct(const Tensor& t) const {
  return t.device == Device::Host && (t.dtype == DType::F32 || t.dtype == DType::I32);
}

StagedComm::Staged StagedComm::stage(const Tensor& t, bool copy_in) {
  Staged s;
  s.words.resize(static_cast<std::size_t>(t.numel()));
  const DType dt = t.dtype == DType::I32 ? DType::I32 : DType::F32;
  s.host = Tensor{s.words.data(), dt, {t.numel()}, Device::Host};
  if (copy_in) be_->copy(s.host, t.view({t.numel()}));
  return s;
}

void StagedComm::unstage(const Staged& s, const Tensor& t) { be_->copy(t.view({t.numel()}), s.host); }

void StagedComm::all_reduce_sum(const Tensor& x) {
  if (direct(x)) return counted([&] { inner_->all_reduce_sum(x); });
  counted([&] {
    Staged s = stage(x, true);
    inner_->all_reduce_sum(s.host);
    unstage(s, x);
  }, ratio(x));
}

void StagedComm::all_gather(const Tensor& in, const Tensor& out) {
  if (direct(in) && direct(out)) return counted([&] { inner_->all_gather(in, out); });
  DIT_CHECK(out.numel() == in.numel() * size(), "all_gather: out has ", out.numel(),
            " elements, expected ", size(), " x ", in.numel());
  counted([&] {
    Staged s = stage(out, false);
    Tensor mine = s.host.rows(in.numel() * rank(), in.numel());
    be_->copy(mine, in.view({in.numel()}));
    inner_->all_gather(mine, s.host);  // in place in the staging buffer
    unstage(s, out);
  }, ratio(out));
}

void StagedComm::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  if (direct(in) && direct(out)) return counted([&] { inner_->reduce_scatter_sum(in, out); });
  counted([&] {
    Staged a = stage(in, true);
    Staged b = stage(out, false);
    inner_->reduce_scatter_sum(a.host, b.host);
    unstage(b, out);
  }, ratio(in));
}

void StagedComm::broadcast(const Tensor& x, int root) {
  if (direct(x)) return counted([&] { inner_->broadcast(x, root); });
  counted([&] {
    Staged s = stage(x, rank() == root);
    inner_->broadcast(s.host, root);
    if (rank() != root) unstage(s, x);
  }, ratio(x));
}

void StagedComm::barrier() {
  counted([&] { inner_->barrier(); });
}

double StagedComm::all_reduce_max(double v) {
  return counted([&] { return inner_->all_reduce_max(v); });
}

void StagedComm::all_reduce_sum(double* v, int n) {
  counted([&] { inner_->all_reduce_sum(v, n); });
}

Request StagedComm::isend(const Tensor& x, int peer, int tag) {
  if (direct(x)) return counted([&] { return inner_->isend(x, peer, tag); });
  return counted([&] {
    Pending p{stage(x, true), Tensor{}};
    Request r = inner_->isend(p.buffer.host, peer, tag);
    pending_.emplace(r.id, std::move(p));  // the words' storage moves, its address does not
    return r;
  }, ratio(x));
}

Request StagedComm::irecv(const Tensor& x, int peer, int tag) {
  if (direct(x)) return counted([&] { return inner_->irecv(x, peer, tag); });
  return counted([&] {
    Pending p{stage(x, false), x};
    Request r = inner_->irecv(p.buffer.host, peer, tag);
    pending_.emplace(r.id, std::move(p));
    return r;
  }, ratio(x));
}

void StagedComm::wait(Request& r) {
  counted([&] {
    const std::int64_t id = r.id;
    inner_->wait(r);
    auto it = pending_.find(id);
    if (it == pending_.end()) return;  // a direct message
    if (it->second.target.data) unstage(it->second.buffer, it->second.target);
    pending_.erase(it);
  });
}

}  // namespace dit
