//! `/proc/self/mountinfo` fields: the one decoder of its octal escapes.

/// Undoes mountinfo's octal escapes (`\040` for a space, …).
pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_anywhere() {
        assert_eq!(super::unescape("/a\\040b"), "/a b");
        assert_eq!(super::unescape("/end\\040"), "/end ");
        assert_eq!(super::unescape("/plain"), "/plain");
    }
}
