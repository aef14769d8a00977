// Checkpoint format internals (see checkpoint_format.h): boxes, mapping validation, shard reads,
// HDF5 writing helpers and agreed errors.
#include "io/checkpoint_format.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "io/golden.h"
#include "io/file_safety.h"

namespace dit::ckpt {

namespace {
constexpr std::size_t kMaxMappings = 4096;       // per tensor; ours have at most 3 * tp
constexpr hsize_t kChunkElements = 1 << 20;      // 4 MiB chunks: one checksum each
constexpr std::int64_t kSlabElements = 1 << 24;  // inspect reads 64 MiB at a time
constexpr std::size_t kMaxName = 4096;

std::string dims_str(const hsize_t* d, int rank) {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << d[i];
  os << ")";
  return os.str();
}

// The selection of `space` as a box; throws unless it is exactly one block.
Box selection_box(hid_t space, const std::string& what) {
  const int rank = H5Sget_simple_extent_ndims(space);
  DIT_CHECK(rank >= 1 && rank <= kMaxDims, what, ": rank ", rank, ", expected 1..", kMaxDims);
  const hssize_t n = H5Sget_select_npoints(space);
  DIT_CHECK(n > 0, what, ": empty selection");
  hsize_t lo[kMaxDims], hi[kMaxDims], extent[kMaxDims];
  DIT_H5_CHECK(H5Sget_select_bounds(space, lo, hi), what);
  H5Sget_simple_extent_dims(space, extent, nullptr);
  Box b;
  b.rank = rank;
  double volume = 1;
  for (int i = 0; i < rank; ++i) {
    DIT_CHECK(lo[i] <= hi[i] && hi[i] < extent[i], what, ": selection outside its extent ",
              dims_str(extent, rank));
    b.start[i] = lo[i];
    b.count[i] = hi[i] - lo[i] + 1;
    volume *= double(b.count[i]);
  }
  DIT_CHECK(volume == double(n), what, ": the selection is not one rectangular block");
  return b;
}

std::string string_of(ssize_t (*get)(hid_t, size_t, char*, size_t), hid_t dcpl, size_t i,
                      const std::string& what) {
  const ssize_t len = get(dcpl, i, nullptr, 0);
  DIT_CHECK(len > 0 && std::size_t(len) < kMaxName, what, ": name of length ", len);
  std::string s(std::size_t(len) + 1, '\0');
  get(dcpl, i, s.data(), s.size());
  s.resize(std::size_t(len));
  return s;
}

bool link_exists(hid_t file, const std::string& object) {
  std::size_t pos = 0;
  while (true) {
    pos = object.find('/', pos + 1);
    const std::string prefix = object.substr(0, pos);
    if (!prefix.empty() && prefix != "/" && H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0)
      return false;
    if (pos == std::string::npos) return true;
  }
}

// "<file>: tensor 'model/x'" (plus the source dataset when it has another name).
std::string where(const std::string& path, const std::string& dataset, const std::string& tensor) {
  return path + ": tensor '" + tensor + "'" +
         (dataset == tensor ? "" : " (dataset '" + dataset + "')");
}

}  // namespace

h5::Handle select_box(hid_t space, const Box& b, const std::string& where) {
  h5::Handle s(H5Scopy(space), H5Sclose);
  DIT_H5_CHECK(H5Sselect_hyperslab(s.get(), H5S_SELECT_SET, b.start, nullptr, b.count, nullptr),
               where);
  return s;
}

// --- boxes -------------------------------------------------------------------------------------

std::int64_t Box::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= static_cast<std::int64_t>(count[i]);
  return n;
}

Box Box::whole(const Shape& s) {
  Box b;
  b.rank = s.rank;
  for (int i = 0; i < s.rank; ++i) b.count[i] = static_cast<hsize_t>(s.dims[i]);
  return b;
}

bool intersect(const Box& a, const Box& b, Box& out) {
  if (a.rank != b.rank) return false;
  out.rank = a.rank;
  for (int i = 0; i < a.rank; ++i) {
    const hsize_t lo = std::max(a.start[i], b.start[i]);
    const hsize_t hi = std::min(a.start[i] + a.count[i], b.start[i] + b.count[i]);
    if (hi <= lo) return false;
    out.start[i] = lo;
    out.count[i] = hi - lo;
  }
  return true;
}

std::string box_str(const Box& b) {
  std::ostringstream os;
  os << "[";
  for (int i = 0; i < b.rank; ++i)
    os << (i ? ", " : "") << b.start[i] << ":" << b.start[i] + b.count[i];
  os << "]";
  return os.str();
}

std::vector<SlicePiece> slice_pieces(const ParamSpec& s, int tp, int t) {
  const Shape local = s.local(tp);  // checks divisibility
  SlicePiece whole{Box::whole(s.global), Box::whole(local)};
  if (s.split == Split::Replicated || tp == 1) return {whole};
  if (s.split == Split::Row) {  // columns [t C/tp, (t+1) C/tp)
    whole.global.start[1] = static_cast<hsize_t>(t * local[1]);
    whole.global.count[1] = static_cast<hsize_t>(local[1]);
    return {whole};
  }
  // Column: each of the `groups` row groups contributes rows [g R + t r, g R + (t+1) r), with
  // R = rows / groups and r = R / tp, stored at local rows [g r, (g+1) r).
  std::vector<SlicePiece> out;
  const std::int64_t group_rows = s.global[0] / s.groups, part = group_rows / tp;
  for (int g = 0; g < s.groups; ++g) {
    SlicePiece p = whole;
    p.global.start[0] = static_cast<hsize_t>(g * group_rows + t * part);
    p.global.count[0] = p.local.count[0] = static_cast<hsize_t>(part);
    p.local.start[0] = static_cast<hsize_t>(g * part);
    out.push_back(p);
  }
  return out;
}

// --- mappings ----------------------------------------------------------------------------------

std::vector<Mapping> read_mappings(const h5::File& index, const std::string& ds,
                                   const Shape& shape) {
  const std::string where = index.path() + ": tensor '" + ds + "'";
  DIT_CHECK(index.exists(ds), where, " is missing from the index");
  h5::Handle d(H5Dopen2(index.id(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  DIT_CHECK(bool(d), where, " is not a dataset");
  const Shape s = index.shape(ds);
  DIT_CHECK(s == shape, where, " has shape ", s.str(), ", expected ", shape.str());
  h5::Handle type(H5Dget_type(d.get()), H5Tclose);
  DIT_CHECK(H5Tget_class(type.get()) == H5T_FLOAT, where, " does not hold floats");
  h5::Handle dcpl(H5Dget_create_plist(d.get()), H5Pclose);
  const Box whole = Box::whole(shape);
  if (H5Pget_layout(dcpl.get()) != H5D_VIRTUAL) return {Mapping{whole, whole, ".", ds}};

  std::size_t n = 0;
  DIT_H5_CHECK(H5Pget_virtual_count(dcpl.get(), &n), where);
  DIT_CHECK(n >= 1 && n <= kMaxMappings, where, " has ", n, " mappings, expected 1..",
            kMaxMappings);
  std::vector<Mapping> out(n);
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string what = where + " mapping " + std::to_string(i);
    Mapping& m = out[i];
    h5::Handle vs(H5Pget_virtual_vspace(dcpl.get(), i), H5Sclose);
    h5::Handle ss(H5Pget_virtual_srcspace(dcpl.get(), i), H5Sclose);
    DIT_CHECK(bool(vs) && bool(ss), what, ": cannot read its selections");
    m.global = selection_box(vs.get(), what);
    m.source = selection_box(ss.get(), what + " (source)");
    m.file = string_of(H5Pget_virtual_filename, dcpl.get(), i, what);
    m.dataset = string_of(H5Pget_virtual_dsetname, dcpl.get(), i, what);
    DIT_CHECK(m.global.rank == shape.rank && m.source.rank == shape.rank, what,
              ": rank differs from the tensor's");
    for (int k = 0; k < shape.rank; ++k) {
      DIT_CHECK(m.global.start[k] + m.global.count[k] <= hsize_t(shape.dims[k]), what, ": block ",
                box_str(m.global), " outside ", shape.str());
      DIT_CHECK(m.global.count[k] == m.source.count[k], what, ": block ", box_str(m.global),
                " taken from a source block of other size ", box_str(m.source));
    }
    // Sources must lie in the checkpoint folder: a plain file name, or "." for the index itself.
    DIT_CHECK(m.file.find('/') == std::string::npos && m.file != "..", what, ": source file '",
              m.file, "' is not a plain file name in the checkpoint folder");
    covered += m.global.numel();
  }
  DIT_CHECK(covered == shape.numel(), where, ": its mappings cover ", covered, " of ",
            shape.numel(), " elements");
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      Box x;
      DIT_CHECK(!intersect(out[i].global, out[j].global, x), where, ": mappings ", i, " and ", j,
                " overlap at ", box_str(x));
    }
  return out;
}

// --- shard reads -------------------------------------------------------------------------------

std::string ShardReader::path_of(const std::string& file) const {
  return file == "." ? index_->path() : dir_ + "/" + file;
}

hid_t ShardReader::file(const std::string& name, const std::string& tensor) {
  if (name == ".") return index_->id();
  auto it = files_.find(name);
  if (it != files_.end()) return it->second.get();
  const std::string path = path_of(name);
  DIT_CHECK(access(path.c_str(), F_OK) == 0, path, ": missing shard file (holds tensor '", tensor,
            "')");
  require_regular(path, "the checkpoint's shard");
  DIT_CHECK(H5Fis_hdf5(path.c_str()) > 0, path, ": not an HDF5 file (shard holding tensor '",
            tensor, "'): corrupt or truncated");
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_cache(fapl.get(), 0, 521, 16 << 20, 0.75);  // whole chunks stay cached between pieces
  h5::Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
  DIT_CHECK(bool(f), path, ": cannot open shard file holding tensor '", tensor, "' (",
            h5::error_text(), "): corrupt or truncated");
  return files_.emplace(name, std::move(f)).first->second.get();
}

h5::Handle ShardReader::dataset(const std::string& file_name, const std::string& name,
                                const std::string& tensor) {
  const hid_t f = file(file_name, tensor);
  const std::string path = path_of(file_name);
  DIT_CHECK(link_exists(f, name), where(path, name, tensor), " is missing from the shard");
  h5::Handle d(H5Dopen2(f, name.c_str(), H5P_DEFAULT), H5Dclose);
  DIT_CHECK(bool(d), where(path, name, tensor), ": cannot open (", h5::error_text(), ")");
  return d;
}

void ShardReader::check(const Mapping& m, const std::string& tensor) {
  h5::Handle d = dataset(m.file, m.dataset, tensor);
  const std::string w = where(path_of(m.file), m.dataset, tensor);
  h5::Handle type(H5Dget_type(d.get()), H5Tclose);
  DIT_CHECK(H5Tget_class(type.get()) == H5T_FLOAT, w, " does not hold floats");
  h5::Handle space(H5Dget_space(d.get()), H5Sclose);
  hsize_t dims[kMaxDims];
  const int rank = H5Sget_simple_extent_ndims(space.get());
  DIT_CHECK(rank == m.source.rank, w, " has rank ", rank, ", the index expects ", m.source.rank);
  H5Sget_simple_extent_dims(space.get(), dims, nullptr);
  for (int k = 0; k < rank; ++k)
    DIT_CHECK(m.source.start[k] + m.source.count[k] <= dims[k], w, " of shape ",
              dims_str(dims, rank), " does not contain the block ", box_str(m.source),
              " the index maps");
  // Storage never written reads back as the fill value without any error.
  h5::Handle dcpl(H5Dget_create_plist(d.get()), H5Pclose);
  bool written = true;
  if (H5Pget_layout(dcpl.get()) == H5D_CHUNKED) {
    hsize_t chunk[kMaxDims], want = 1, have = 0;
    DIT_CHECK(H5Pget_chunk(dcpl.get(), rank, chunk) == rank, w, ": unreadable chunk layout");
    for (int k = 0; k < rank; ++k) want *= chunk[k] ? (dims[k] + chunk[k] - 1) / chunk[k] : 0;
    written = H5Dget_num_chunks(d.get(), space.get(), &have) >= 0 && have == want;
  } else if (H5Pget_layout(dcpl.get()) == H5D_CONTIGUOUS) {
    hsize_t n = 1;
    for (int k = 0; k < rank; ++k) n *= dims[k];
    written = H5Dget_storage_size(d.get()) >= n * H5Tget_size(type.get());
  }
  DIT_CHECK(written, w, " holds no data or only part of it (never written)");
}

void ShardReader::read(const Mapping& m, const Box& g, float* dest, const Shape& dest_shape,
                       const Box& dest_box, const std::string& tensor) {
  h5::Handle d = dataset(m.file, m.dataset, tensor);
  Box src = g;
  for (int k = 0; k < g.rank; ++k)
    src.start[k] = m.source.start[k] + (g.start[k] - m.global.start[k]);
  const std::string w = where(path_of(m.file), m.dataset, tensor);
  h5::Handle fspace(H5Dget_space(d.get()), H5Sclose);
  h5::Handle fsel = select_box(fspace.get(), src, w);
  hsize_t mdims[kMaxDims];
  for (int k = 0; k < dest_shape.rank; ++k) mdims[k] = static_cast<hsize_t>(dest_shape.dims[k]);
  h5::Handle mspace(H5Screate_simple(dest_shape.rank, mdims, nullptr), H5Sclose);
  h5::Handle msel = select_box(mspace.get(), dest_box, w);
  const herr_t rc = H5Dread(d.get(), H5T_NATIVE_FLOAT, msel.get(), fsel.get(), H5P_DEFAULT, dest);
  DIT_CHECK(rc >= 0, w, ": cannot read block ", box_str(src), " (", h5::error_text(),
            "): the shard is corrupt");
}

std::int64_t ShardReader::verify(const std::string& file_name, const std::string& name,
                                 const std::string& tensor) {
  h5::Handle d = dataset(file_name, name, tensor);
  const std::string w = where(path_of(file_name), name, tensor);
  h5::Handle space(H5Dget_space(d.get()), H5Sclose);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  DIT_CHECK(rank >= 1 && rank <= kMaxDims, w, " has rank ", rank);
  Box all;
  all.rank = rank;
  H5Sget_simple_extent_dims(space.get(), all.count, nullptr);
  double volume = 1;
  for (int k = 0; k < rank; ++k) volume *= double(all.count[k]);
  DIT_CHECK(volume <= double(std::int64_t(1) << 34), w, " of shape ", dims_str(all.count, rank),
            " is implausibly large");
  std::int64_t row = 1;
  for (int k = 1; k < rank; ++k) {
    DIT_CHECK(all.count[k] > 0 && all.count[k] < (hsize_t(1) << 28) &&
                  row * std::int64_t(all.count[k]) <= kSlabElements,
              w, " of shape ", dims_str(all.count, rank), " has implausibly large rows");
    row *= static_cast<std::int64_t>(all.count[k]);
  }
  const hsize_t rows_per_slab = hsize_t(std::max<std::int64_t>(1, kSlabElements / row));
  std::vector<float> buf;
  std::int64_t nonfinite = 0;
  for (hsize_t r0 = 0; r0 < all.count[0]; r0 += rows_per_slab) {
    Box slab = all;
    slab.start[0] = r0;
    slab.count[0] = std::min(rows_per_slab, all.count[0] - r0);
    buf.resize(static_cast<std::size_t>(slab.numel()));
    const hsize_t n = static_cast<hsize_t>(slab.numel());
    h5::Handle fsel = select_box(space.get(), slab, w);
    h5::Handle mspace(H5Screate_simple(1, &n, nullptr), H5Sclose);
    DIT_CHECK(
        H5Dread(d.get(), H5T_NATIVE_FLOAT, mspace.get(), fsel.get(), H5P_DEFAULT, buf.data()) >= 0,
        w, ": cannot read rows ", r0, "..", r0 + slab.count[0], " (", h5::error_text(),
        "): the shard is corrupt");
    for (float v : buf) nonfinite += !std::isfinite(v);
  }
  return nonfinite;
}

// --- agreed errors -------------------------------------------------------------------------------

}  // namespace dit::ckpt
