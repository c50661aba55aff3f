//! A kernel's machine-code identity: what runs on the GPU, apart from how it was named.
//!
//! A kernel id hashes its template and every header the template includes, so any edit
//! renames every kernel of the template, including the ones whose code the edit never
//! reaches (a comment, a switch another config uses). The cubin's bytes do not tell those
//! apart either: its line table and embedded PTX follow the source. The code hash covers
//! only what decides how the kernel runs: the instructions of each `.text.*` section and
//! ptxas's resource report (registers, barriers, static shared memory, stack and spills).
//! Two builds with the same code hash run the same machine code with the same registers,
//! so a timing of one is a timing of the other.

use fa4_spec::Fnv1a64;

use super::resources::Resources;

/// The code hash of `cubin` (an ELF64 object, as NVRTC writes it) with the resources
/// ptxas reported for it: 16 hex digits, or `None` where the cubin is not an ELF64 object
/// with a `.text.` section.
pub fn code_hash(cubin: &[u8], resources: &Resources) -> Option<String> {
    let sections = text_sections(cubin)?;
    if sections.is_empty() {
        return None;
    }
    let mut h = Fnv1a64::default();
    for (name, bytes) in sections {
        h.field(name).update(bytes).update(&[0x1e]);
    }
    let r = resources;
    for n in [
        r.registers,
        r.barriers,
        r.static_smem,
        r.stack_frame,
        r.spill_stores,
        r.spill_loads,
    ] {
        h.field(&n.to_string());
    }
    Some(h.hex())
}

/// The `.text.*` sections of an ELF64 little-endian object, in section-header order,
/// as (name, contents); `None` where the headers do not parse.
fn text_sections(elf: &[u8]) -> Option<Vec<(&str, &[u8])>> {
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?));
    // ELF magic, 64-bit class, little-endian.
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let shoff = usize::try_from(u64_at(0x28)?).ok()?;
    let shentsize = usize::from(u16_at(0x3a)?);
    let shnum = usize::from(u16_at(0x3c)?);
    let shstrndx = usize::from(u16_at(0x3e)?);
    if shentsize < 64 || shstrndx >= shnum {
        return None;
    }
    // (name offset, file offset, size) of section i.
    let header = |i: usize| -> Option<(usize, usize, usize)> {
        let at = shoff.checked_add(i.checked_mul(shentsize)?)?;
        Some((
            usize::try_from(u32_at(at)?).ok()?,
            usize::try_from(u64_at(at + 24)?).ok()?,
            usize::try_from(u64_at(at + 32)?).ok()?,
        ))
    };
    let contents = |offset: usize, size: usize| elf.get(offset..offset.checked_add(size)?);
    let (_, names_offset, names_size) = header(shstrndx)?;
    let names = contents(names_offset, names_size)?;
    let mut out = Vec::new();
    for i in 0..shnum {
        let (name_at, offset, size) = header(i)?;
        let name = names.get(name_at..)?;
        let name = std::str::from_utf8(&name[..name.iter().position(|&b| b == 0)?]).ok()?;
        if name.starts_with(".text.") {
            out.push((name, contents(offset, size)?));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 object: a null section, the given (name, contents) sections, and
    /// the section-name table last.
    fn elf(sections: &[(&str, &[u8])]) -> Vec<u8> {
        let mut names = vec![0u8];
        let mut name_at = Vec::new();
        for (name, _) in sections.iter().copied().chain([(".shstrtab", &[][..])]) {
            name_at.push(names.len() as u32);
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        let mut out = vec![0u8; 64];
        out[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let mut placed = Vec::new();
        for (_, bytes) in sections {
            placed.push((out.len(), bytes.len()));
            out.extend_from_slice(bytes);
        }
        placed.push((out.len(), names.len()));
        out.extend_from_slice(&names);
        let shoff = out.len();
        out.extend_from_slice(&[0u8; 64]); // the null section
        for (i, (offset, size)) in placed.iter().enumerate() {
            let mut h = [0u8; 64];
            h[..4].copy_from_slice(&name_at[i].to_le_bytes());
            h[24..32].copy_from_slice(&(*offset as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(*size as u64).to_le_bytes());
            out.extend_from_slice(&h);
        }
        let shnum = placed.len() as u16 + 1;
        out[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        out[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        out[0x3c..0x3e].copy_from_slice(&shnum.to_le_bytes());
        out[0x3e..0x40].copy_from_slice(&(shnum - 1).to_le_bytes());
        out
    }

    fn report(registers: u32) -> Resources {
        Resources {
            registers,
            ..Resources::default()
        }
    }

    #[test]
    fn only_the_instructions_and_the_resources_count() {
        let code: &[u8] = &[1, 2, 3, 4];
        let base = elf(&[(".text.fa4_fwd", code), (".nv_debug_ptx_txt", b"// v1")]);
        let h = code_hash(&base, &report(168)).unwrap();
        // Another embedded PTX and line table: the same code.
        let relined = elf(&[
            (".text.fa4_fwd", code),
            (".nv_debug_ptx_txt", b"// v2, longer"),
        ]);
        assert_eq!(
            code_hash(&relined, &report(168)).as_deref(),
            Some(h.as_str())
        );
        // Another instruction, or another register count: other code.
        let recoded = elf(&[
            (".text.fa4_fwd", &[1, 2, 3, 5]),
            (".nv_debug_ptx_txt", b"// v1"),
        ]);
        assert_ne!(code_hash(&recoded, &report(168)).unwrap(), h);
        assert_ne!(code_hash(&base, &report(232)).unwrap(), h);
    }

    #[test]
    fn a_section_past_the_end_of_the_file_has_no_hash() {
        let mut bad = elf(&[(".text.fa4_fwd", &[1, 2, 3, 4])]);
        let shoff = u64::from_le_bytes(bad[0x28..0x30].try_into().unwrap()) as usize;
        // The .text header (section 1) says its 4 bytes are 4,000.
        bad[shoff + 64 + 32..shoff + 64 + 40].copy_from_slice(&4000u64.to_le_bytes());
        assert_eq!(code_hash(&bad, &report(1)), None);
    }

    #[test]
    fn what_is_not_an_elf_with_code_has_no_hash() {
        assert_eq!(code_hash(b"not an elf", &report(1)), None);
        assert_eq!(code_hash(&[], &report(1)), None);
        let no_text = elf(&[(".nv.info", &[9, 9])]);
        assert_eq!(code_hash(&no_text, &report(1)), None);
        // A file cut inside its section headers.
        let mut cut = elf(&[(".text.fa4_fwd", &[1, 2, 3, 4])]);
        cut.truncate(cut.len() - 64 - 30);
        assert_eq!(code_hash(&cut, &report(1)), None);
    }
}
