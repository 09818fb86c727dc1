// The site's search box (website/build.py writes the index, _static/search-index.js, from mystmd's
// myst.search.json): every word typed must appear in a heading path or its paragraph; the first 30 hits are listed.
document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("search"), list = document.getElementById("search-results");
  const root = document.body.dataset.root || ".", records = window.COURSE_SEARCH || [];
  const text = (r) => (r.t + "\n" + r.c).toLowerCase();
  const escape = (s) => s.replace(/[&<>"]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]));
  box.addEventListener("input", () => {
    const words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) { list.innerHTML = ""; return; }
    const hits = records.filter((r) => words.every((w) => text(r).includes(w))).slice(0, 30);
    list.innerHTML = hits.length ? hits.map((r) => {
      const at = r.c.toLowerCase().indexOf(words[0]);
      const bit = at < 0 ? "" : r.c.slice(Math.max(0, at - 40), at + 80);
      return `<li><a href="${escape(root + "/" + r.u)}">${escape(r.t)}</a><br><small>${escape(bit)}</small></li>`;
    }).join("") : "<li>no match</li>";
  });
});
