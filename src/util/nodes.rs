//! The machine's NUMA nodes, as the kernel lists them.

#[cfg(test)]
thread_local! {
    /// In unit tests: the nodes `nodes` gives this thread in place of the
    /// machine's.
    pub(crate) static FAKE_NODES: std::cell::RefCell<Option<Vec<Node>>> =
        const { std::cell::RefCell::new(None) };
}

/// A node of the machine and its CPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// The node's number.
    pub id: usize,
    /// Its CPUs.
    pub cpus: Vec<usize>,
}

/// The machine's NUMA nodes from `/sys/devices/system/node` (empty where the
/// directory is missing or unreadable).
pub fn nodes() -> Vec<Node> {
    #[cfg(test)]
    if let Some(v) = FAKE_NODES.with(|f| f.borrow().clone()) {
        return v;
    }
    // (Through a descriptor a program's wholesale close leaves.)
    let root = std::path::Path::new("/sys/devices/system/node");
    let Ok(listed) = crate::util::fds::dir_names(root) else {
        return Vec::new();
    };
    let mut out: Vec<Node> = listed
        .into_iter()
        .filter_map(|name| {
            let name = name.into_string().ok()?;
            let id: usize = name.strip_prefix("node")?.parse().ok()?;
            let list = crate::util::fds::read_text(root.join(&name).join("cpulist"))?;
            Some(Node {
                id,
                cpus: parse_cpulist(list.trim())?,
            })
        })
        .collect();
    out.sort_by_key(|n| n.id);
    out
}

/// `0-3,8,10-11` (as the kernel writes CPU lists, surrounding whitespace
/// allowed) as a list of CPUs; None if malformed.
pub(crate) fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let s = s.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}
