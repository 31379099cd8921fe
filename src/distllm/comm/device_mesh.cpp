#include "distllm/comm/device_mesh.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "distllm/base/error.h"
#include "distllm/base/strings.h"

namespace distllm::comm {

DeviceMesh::DeviceMesh(ProcessGroupPtr parent, std::vector<std::pair<std::string, int>> dims)
    : parent_(std::move(parent)), dims_(std::move(dims)) {
  DL_CHECK(parent_ != nullptr, "DeviceMesh: parent group is null");
  DL_CHECK(!dims_.empty(), "DeviceMesh: no dimensions");
  long product = 1;
  std::set<std::string> names;
  std::string shape;
  for (const auto& [name, n] : dims_) {
    DL_CHECK(n >= 1, "DeviceMesh: dimension '%s' has size %d", name.c_str(), n);
    DL_CHECK(names.insert(name).second, "DeviceMesh: dimension '%s' appears twice", name.c_str());
    product *= n;
    shape += strprintf("%s%s=%d", shape.empty() ? "" : ", ", name.c_str(), n);
  }
  DL_CHECK(product == parent_->size(), "DeviceMesh (%s) has %ld positions but group '%s' has %d ranks",
           shape.c_str(), product, parent_->name().c_str(), parent_->size());
  // Row-major coordinates of this rank.
  coords_.resize(dims_.size());
  int rest = parent_->rank();
  for (size_t d = dims_.size(); d-- > 0;) {
    coords_[d] = rest % dims_[d].second;
    rest /= dims_[d].second;
  }
  // One split per dimension: color = position along the other dimensions.
  for (size_t d = 0; d < dims_.size(); ++d) {
    int color = 0;
    for (size_t e = 0; e < dims_.size(); ++e)
      if (e != d) color = color * dims_[e].second + coords_[e];
    GroupOptions o = parent_->options();
    o.name = strprintf("%s/%s%d", parent_->name().c_str(), dims_[d].first.c_str(), color);
    groups_.push_back(parent_->split(color, coords_[d], o));
  }
}

size_t DeviceMesh::index(const std::string& dim) const {
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].first == dim) return d;
  throw_error(strprintf("DeviceMesh has no dimension '%s'", dim.c_str()));
}

int DeviceMesh::size(const std::string& dim) const { return dims_[index(dim)].second; }
int DeviceMesh::coord(const std::string& dim) const { return coords_[index(dim)]; }
const ProcessGroupPtr& DeviceMesh::group(const std::string& dim) const { return groups_[index(dim)]; }

ProcessGroupPtr DeviceMesh::flatten(const std::vector<std::string>& dims) const {
  std::vector<bool> inside(dims_.size(), false);
  int key = 0;
  std::string name;
  for (const std::string& dim : dims) {
    const size_t d = index(dim);
    DL_CHECK(!inside[d], "DeviceMesh::flatten: dimension '%s' given twice", dim.c_str());
    inside[d] = true;
    key = key * dims_[d].second + coords_[d];
    name += dim;
  }
  int color = 0;
  for (size_t e = 0; e < dims_.size(); ++e)
    if (!inside[e]) color = color * dims_[e].second + coords_[e];
  GroupOptions o = parent_->options();
  o.name = strprintf("%s/%s%d", parent_->name().c_str(), name.c_str(), color);
  return parent_->split(color, key, o);
}

int DeviceMesh::rank_at(const std::vector<int>& coords) const {
  DL_CHECK(coords.size() == dims_.size(), "DeviceMesh::rank_at: %zu coordinates for %zu dimensions", coords.size(),
           dims_.size());
  int r = 0;
  for (size_t d = 0; d < dims_.size(); ++d) {
    DL_CHECK(coords[d] >= 0 && coords[d] < dims_[d].second, "DeviceMesh::rank_at: %s=%d is outside [0, %d)",
             dims_[d].first.c_str(), coords[d], dims_[d].second);
    r = r * dims_[d].second + coords[d];
  }
  return r;
}

std::vector<std::pair<std::string, int>> parse_mesh(const std::string& text, int world_size,
                                                    const std::vector<std::string>& known, const std::string& infer) {
  std::vector<std::pair<std::string, int>> dims;
  std::string names;
  for (const auto& k : known) names += (names.empty() ? "" : ", ") + k;
  long product = 1;
  for (const std::string& part : split(text, ',')) {
    const size_t eq = part.find('=');
    DL_CHECK(eq != std::string::npos, "--mesh: '%s' is not name=size (e.g. dp=2,tp=2)", part.c_str());
    const std::string name = part.substr(0, eq), value = part.substr(eq + 1);
    DL_CHECK(std::find(known.begin(), known.end(), name) != known.end(), "--mesh: unknown dimension '%s' (known: %s)",
             name.c_str(), names.c_str());
    char* end = nullptr;
    const long n = std::strtol(value.c_str(), &end, 10);
    DL_CHECK(!value.empty() && *end == '\0' && n >= 1 && n <= (1 << 20), "--mesh: the size of '%s' must be a whole "
             "number >= 1, got '%s'", name.c_str(), value.c_str());
    for (const auto& d : dims) DL_CHECK(d.first != name, "--mesh: dimension '%s' appears twice", name.c_str());
    dims.emplace_back(name, static_cast<int>(n));
    product *= n;
  }
  DL_CHECK(!dims.empty(), "--mesh is empty (e.g. dp=2,tp=2)");
  const bool has_infer = std::any_of(dims.begin(), dims.end(), [&](const auto& d) { return d.first == infer; });
  if (!has_infer && !infer.empty()) {
    DL_CHECK(world_size % product == 0, "--mesh %s: %ld ranks per %s group do not divide the %d ranks", text.c_str(),
             product, infer.c_str(), world_size);
    dims.insert(dims.begin(), {infer, static_cast<int>(world_size / product)});
    product = world_size;
  }
  DL_CHECK(product == world_size, "--mesh %s has %ld positions but %d ranks were started", text.c_str(), product,
           world_size);
  return dims;
}

}  // namespace distllm::comm
