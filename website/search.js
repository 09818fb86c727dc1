// The site's search box (website/build.py writes the index, _static/search-index.js, from mystmd's
// myst.search.json: one record per heading and paragraph). A record matches when every word typed appears in its
// heading path or its text; matches are ranked by where the words appear - in the section's own heading first,
// then anywhere in its heading path, then by how often in its text - each section once, and the first 30 are listed.
function score(record, words) {  // 0: some word is nowhere in the record
  const path = record.t.toLowerCase(), own = path.split(" > ").pop(), body = record.c.toLowerCase();
  if (!words.every((w) => path.includes(w) || body.includes(w))) return 0;
  let s = 0;
  for (const w of words) {
    if (own.includes(w)) s += 100;
    else if (path.includes(w)) s += 30;
    s += Math.min(body.split(w).length - 1, 10);
  }
  return s;
}

function rank(records, query) {
  const words = query.toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return [];
  const listed = new Set();
  return records
    .map((r, i) => ({r, i, s: score(r, words)}))
    .filter(({s}) => s > 0)
    .sort((a, b) => b.s - a.s || a.i - b.i)  // ties keep the site's order
    .map(({r}) => r)
    .filter((r) => !listed.has(r.u) && listed.add(r.u))  // a section once, at its best record
    .slice(0, 30);
}

if (typeof document !== "undefined") {
  document.addEventListener("DOMContentLoaded", () => {
    const box = document.getElementById("search"), list = document.getElementById("search-results");
    const root = document.body.dataset.root || ".", records = window.COURSE_SEARCH || [];
    const escape = (s) => s.replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
    box.addEventListener("input", () => {
      const hits = rank(records, box.value), first = box.value.toLowerCase().split(/\s+/).filter(Boolean)[0];
      if (!first) { list.innerHTML = ""; return; }
      list.innerHTML = hits.length ? hits.map((r) => {
        const at = r.c.toLowerCase().indexOf(first);
        const bit = at < 0 ? "" : r.c.slice(Math.max(0, at - 40), at + 80);
        return `<li><a href="${escape(root + "/" + r.u)}">${escape(r.t)}</a><br><small>${escape(bit)}</small></li>`;
      }).join("") : "<li>no match</li>";
    });
  });
}
if (typeof module !== "undefined") module.exports = {rank};  // node, for the site's test
